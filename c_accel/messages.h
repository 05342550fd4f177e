/* hutch C accelerator: finding a run's messages in bytes read from a journal segment.
 *
 * The C twin of find_messages() in core/store/paging.py, which is the reference: the
 * same fields, stop, status and size, and the same bits cleared, on any input.
 * It checks each record as core/store/records.py's next_record does (header check,
 * CRC-32) and reads a message's fields as core/store/journal.py's message_fields. */
#ifndef HUTCH_MESSAGES_H
#define HUTCH_MESSAGES_H

#include <stddef.h>
#include <stdint.h>

/* How a scan ended: CLEAN, TORN, CORRUPT and INCOMPLETE of core/store/records.py. */
enum { HUTCH_CLEAN = 0, HUTCH_TORN = 1, HUTCH_CORRUPT = 2, HUTCH_INCOMPLETE = 3 };

/* Numbers per message found: FIELDS of core/store/journal.py (id, flags, arrival, then
 * offsets: route, routing key, queue names, header tail, body tail, end). */
enum { HUTCH_FIELDS = 9 };

/* The outcome array: where the next record starts, how the scan ended, and the
 * size of the record that goes on past the data (INCOMPLETE; 0 otherwise). */
enum { HUTCH_FOUND_STOP = 0, HUTCH_FOUND_STATUS = 1, HUTCH_FOUND_SIZE = 2, HUTCH_FOUND_SLOTS = 3 };

/* The MESSAGE records of buf[pos:len] whose id's bit is set in bitmap (bit i:
 * id first_id + i), at most want of them: their bits are cleared and their
 * fields go to fields (want * HUTCH_FIELDS numbers). Returns how many. With no
 * bitmap (bitmap_len 0: a dense run), those whose id is the next of first_id,
 * first_id + 1, ... in turn. */
size_t hutch_find_messages(const uint8_t *buf, size_t len, size_t pos, uint64_t first_id,
                           uint8_t *bitmap, size_t bitmap_len, size_t want,
                           uint64_t *fields, uint64_t *outcome);

#endif

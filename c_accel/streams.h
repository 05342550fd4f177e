/* hutch C accelerator: a stream's records into basic.deliver frames.
 *
 * The C twin of deliveries() in core/streams/streamlog.py, which is the reference: the
 * same frames, counts, positions and statuses, on any input. */
#ifndef HUTCH_STREAMS_H
#define HUTCH_STREAMS_H

#include <stddef.h>
#include <stdint.h>

/* Why it stopped: WANT, DONE and BAD_RECORD are core/streams/streamlog.py's; OUT_FULL is
 * this one's own (the next delivery's frames do not fit in out: call again). */
enum { HUTCH_WANT = 0, HUTCH_DONE = 1, HUTCH_BAD_RECORD = 2, HUTCH_OUT_FULL = 3 };

/* The state slots: read (POS, OFFSET, AFTER_MS) and written back (all five). */
enum { HUTCH_S_POS = 0, HUTCH_S_OFFSET = 1, HUTCH_S_AFTER_MS = 2, HUTCH_S_GIVEN = 3,
       HUTCH_S_STATUS = 4, HUTCH_S_SLOTS = 5 };

/* Frames of basic.deliver on channel `number` to the consumer whose tag (as a
 * shortstr, length octet first) is tag_ss[0:tag_len], delivery tags from tag on,
 * for the records of buf[pos:end] (pos in state): at most count deliveries, each
 * of a record at or past state's OFFSET, stamped at or after its AFTER_MS (when
 * not 0), and below visible; stopping once space bytes of frames were made, or
 * when the next delivery's frames would not fit in out[0:capacity]. Returns the
 * bytes written to out; state gets where it stopped and why. */
size_t hutch_stream_deliveries(const uint8_t *buf, size_t end, uint64_t *state, uint64_t visible,
                               uint64_t count, uint64_t space, unsigned number, const uint8_t *tag_ss,
                               size_t tag_len, uint64_t tag, uint64_t max_payload, uint8_t *out,
                               size_t capacity);

#endif

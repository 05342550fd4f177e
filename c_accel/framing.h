/* hutch C accelerator: the batch frame scanner.
 *
 * The C twin of scan_frames() in amqp091/framing.py, which is the reference:
 * same records, same stop, same status, same detail, on any input. */
#ifndef HUTCH_FRAMING_H
#define HUTCH_FRAMING_H

#include <stddef.h>
#include <stdint.h>

/* Why a scan stopped: the values of NEED_MORE, FULL, ... in amqp091/framing.py. */
enum {
    HUTCH_NEED_MORE = 0,      /* the rest is not a whole frame: wait for more bytes */
    HUTCH_FULL = 1,           /* records is full: scan again from the stop */
    HUTCH_OVERSIZE = 2,       /* payload size above max_payload; detail = that size */
    HUTCH_BAD_FRAME_END = 3   /* no 0xCE after the payload; detail = the octet found */
};

/* Slots of one record (six uint64_t: a delivery tag must fit, even where size_t
 * is 32 bits) and of the outcome array. A record is one frame, one whole
 * publish, or one basic.ack/nack/reject: see PUBLISH and SETTLE in amqp091/framing.py. */
enum { HUTCH_TYPE = 0, HUTCH_CHANNEL = 1, HUTCH_PAYLOAD_START = 2, HUTCH_PAYLOAD_END = 3,
       HUTCH_HEADER_END = 4, HUTCH_BODY_END = 5, HUTCH_RECORD_SLOTS = 6 };
/* The record types of a whole publish and of a settlement (above any frame type octet). */
enum { HUTCH_PUBLISH = 256, HUTCH_SETTLE = 257 };
/* A settlement record's slots: the method id and the delivery tag. */
enum { HUTCH_METHOD_ID = 4, HUTCH_DELIVERY_TAG = 5 };
enum { HUTCH_STOP = 0, HUTCH_STATUS = 1, HUTCH_DETAIL = 2, HUTCH_OUTCOME_SLOTS = 3 };

/* Record the complete frames in buf[pos:len], at most capacity of them, in
 * records (capacity * HUTCH_RECORD_SLOTS size_t). Returns how many; outcome
 * (HUTCH_OUTCOME_SLOTS size_t) gets where the scan stopped, why, and the size
 * or octet at fault. */
size_t hutch_scan_frames(const uint8_t *buf, size_t len, size_t pos, int64_t max_payload,
                         uint64_t *records, size_t capacity, size_t *outcome);

#endif

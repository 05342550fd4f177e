/* hutch C accelerator: a run of whole publishes into a stream's records (see appends.h).
 *
 * A publish, as the frame scanner (framing.c) records it, is a method frame
 * [PAYLOAD_START, PAYLOAD_END), a content header frame ending at HEADER_END and, unless
 * the body is empty, one body frame ending at BODY_END (each index is a frame-end
 * octet's). The scanner has checked the frames are whole and on one channel, and that
 * the body frame holds exactly the size the header gives. A record (core/store/records.py,
 * core/streams/streamlog.py) is
 *     0xA5  kind(1)  length(4)  check(2)  payload(length)  crc32(4)
 * check being the low 16 bits of the CRC-32 of kind and length, which also seeds the
 * payload's CRC-32. */
#include <string.h>

#include "appends.h"
#include "crc32.h"
#include "bigendian.h"
#include "runs.h"

#define MAGIC 0xA5
#define KIND_MESSAGE 32
#define HEADER_SIZE 8
#define TRAILER_SIZE 4
#define PREFIX 16 /* offset and timestamp */

size_t hutch_stream_appends(const uint8_t *buf, size_t len, const uint64_t *records, size_t count,
                            unsigned number, const uint8_t *method, size_t method_len,
                            const uint8_t *header, size_t header_len, size_t fixed_len, uint64_t max_body,
                            const uint8_t *prefix, size_t prefix_len, size_t body_size_at,
                            const uint8_t *after, size_t after_len, uint64_t offset,
                            uint64_t timestamp_ms, size_t max_count, size_t budget, uint8_t *out,
                            size_t capacity, uint64_t *outcome)
{
    uint8_t *p = out, *payload, fields[5];
    size_t taken = 0, next = 0, limit = budget < capacity ? budget : capacity;
    (void)len; /* every index comes from the scanner, which checked it against len */
    if (body_size_at > prefix_len || prefix_len - body_size_at < 8 || body_size_at < HUTCH_BODY_SIZE_AT + 8)
        limit = 0; /* not a prefix this was made for: take nothing */
    while (taken < count && taken < max_count) {
        const uint64_t *rec = records + taken * HUTCH_R_SLOTS;
        uint64_t body_size, length;
        size_t tail_at = 0, tail_len = 0, total, header_size, own_at = 0, own_len = after_len;
        uint32_t seed, crc;
        if (!hutch_publish_alike(buf, rec, number, method, method_len, header, header_len, fixed_len, &body_size,
                                 &header_size)
            || body_size > max_body)
            break;
        if (fixed_len < header_len) {
            /* the properties after fixed_len are this publish's own, with the frame-end: they
             * take the template's `after`, and both lengths before them change by as much */
            own_at = (size_t)rec[HUTCH_R_PAYLOAD_END] + 8 + fixed_len;
            own_len = header_size - fixed_len + 1;
        }
        if (body_size) {
            tail_at = (size_t)rec[HUTCH_R_HEADER_END] + 4; /* the body frame's size, body and frame-end */
            tail_len = (size_t)rec[HUTCH_R_BODY_END] + 1 - tail_at;
        }
        length = (uint64_t)PREFIX + prefix_len + 8 + own_len + tail_len;
        total = HEADER_SIZE + (size_t)length + TRAILER_SIZE;
        if (length > 0x7FFFFFFF || total > limit - (size_t)(p - out))
            break;
        fields[0] = KIND_MESSAGE;
        put32(fields + 1, (uint32_t)length);
        seed = hutch_crc32(fields, 5, 0);
        p[0] = MAGIC;
        memcpy(p + 1, fields, 5);
        p[6] = (uint8_t)(seed >> 8);
        p[7] = (uint8_t)seed;
        payload = p + HEADER_SIZE;
        p = put64(payload, offset);
        p = put64(p, timestamp_ms);
        memcpy(p, prefix, prefix_len);
        put64(p + body_size_at, body_size);
        if (own_len != after_len) {
            /* the stored header's length and its frame's size, just before the class id */
            uint8_t *sizes = p + body_size_at - HUTCH_BODY_SIZE_AT - 8;
            put32(sizes, get32(sizes) + (uint32_t)own_len - (uint32_t)after_len);
            put32(sizes + 4, get32(sizes + 4) + (uint32_t)own_len - (uint32_t)after_len);
        }
        p += prefix_len;
        p = put64(p, offset);
        memcpy(p, own_at ? buf + own_at : after, own_len);
        p += own_len;
        memcpy(p, buf + tail_at, tail_len);
        p += tail_len;
        crc = hutch_crc32(payload, (size_t)(p - payload), seed);
        p = put32(p, crc);
        offset++;
        taken++;
        next = (size_t)rec[HUTCH_R_BODY_END] + 1;
    }
    outcome[HUTCH_A_TAKEN] = taken;
    outcome[HUTCH_A_NEXT] = next;
    return (size_t)(p - out);
}

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

#define MAGIC 0xA5
#define KIND_MESSAGE 32
#define HEADER_SIZE 8
#define TRAILER_SIZE 4
#define PREFIX 16 /* offset and timestamp */
#define PUBLISH 256 /* amqp091/framing.py's record type of a whole publish */
/* amqp091/framing.py's record slots */
#define RECORD_SLOTS 6
#define TYPE 0
#define CHANNEL 1
#define PAYLOAD_START 2
#define PAYLOAD_END 3
#define HEADER_END 4
#define BODY_END 5
/* A content header payload: class(2) weight(2) body size(8) flags and properties. */
#define BODY_SIZE_AT 4
#define PROPERTIES_AT 12

/* Whether the publish recorded at rec is like the run's first: the same channel, method
 * arguments (after the ticket) and content header but for the body size, which it puts
 * in *body_size. The indexes come from the scanner, so they lie inside buf. */
static int alike(const uint8_t *buf, const uint64_t *rec, unsigned number, const uint8_t *method,
                 size_t method_len, const uint8_t *header, size_t header_len, uint64_t *body_size)
{
    size_t payload = (size_t)rec[PAYLOAD_START], end = (size_t)rec[PAYLOAD_END];
    size_t header_at = end + 8, header_end = (size_t)rec[HEADER_END];
    if (rec[TYPE] != PUBLISH || rec[CHANNEL] != number)
        return 0;
    if (end - payload < 6 || end - payload - 6 != method_len || memcmp(buf + payload + 6, method, method_len) != 0)
        return 0;
    if (header_end - header_at != header_len || header_len < PROPERTIES_AT)
        return 0;
    if (memcmp(buf + header_at, header, BODY_SIZE_AT) != 0
        || memcmp(buf + header_at + PROPERTIES_AT, header + PROPERTIES_AT, header_len - PROPERTIES_AT) != 0)
        return 0;
    *body_size = get64(buf + header_at + BODY_SIZE_AT);
    return 1;
}

size_t hutch_stream_appends(const uint8_t *buf, size_t len, const uint64_t *records, size_t count,
                            unsigned number, const uint8_t *method, size_t method_len,
                            const uint8_t *header, size_t header_len, uint64_t max_body,
                            const uint8_t *prefix, size_t prefix_len, size_t body_size_at,
                            const uint8_t *after, size_t after_len, uint64_t offset,
                            uint64_t timestamp_ms, size_t max_count, size_t budget, uint8_t *out,
                            size_t capacity, uint64_t *outcome)
{
    uint8_t *p = out, *payload, fields[5];
    size_t taken = 0, next = 0, limit = budget < capacity ? budget : capacity;
    (void)len; /* every index comes from the scanner, which checked it against len */
    if (body_size_at > prefix_len || prefix_len - body_size_at < 8)
        limit = 0; /* not a prefix this was made for: take nothing */
    while (taken < count && taken < max_count) {
        const uint64_t *rec = records + taken * RECORD_SLOTS;
        uint64_t body_size, length;
        size_t tail_at = 0, tail_len = 0, total;
        uint32_t seed, crc;
        if (!alike(buf, rec, number, method, method_len, header, header_len, &body_size) || body_size > max_body)
            break;
        if (body_size) {
            tail_at = (size_t)rec[HEADER_END] + 4; /* the body frame's size, body and frame-end */
            tail_len = (size_t)rec[BODY_END] + 1 - tail_at;
        }
        length = (uint64_t)PREFIX + prefix_len + 8 + after_len + tail_len;
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
        p += prefix_len;
        p = put64(p, offset);
        memcpy(p, after, after_len);
        p += after_len;
        memcpy(p, buf + tail_at, tail_len);
        p += tail_len;
        crc = hutch_crc32(payload, (size_t)(p - payload), seed);
        p = put32(p, crc);
        offset++;
        taken++;
        next = (size_t)rec[BODY_END] + 1;
    }
    outcome[HUTCH_A_TAKEN] = taken;
    outcome[HUTCH_A_NEXT] = next;
    return (size_t)(p - out);
}

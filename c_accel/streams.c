/* hutch C accelerator: a stream's records into basic.deliver frames (see streams.h).
 *
 * A record (core/store/records.py, core/streams/streamlog.py) is
 *     0xA5  kind(1)  length(4)  check(2)  payload(length)  crc32(4)
 * and a stream's payload is
 *     offset(8) timestamp(8) exchange shortstr, routing-key shortstr,
 *     header size(4), content header frame tail, body frame tail (or nothing)
 * where a frame tail is the frame without its type and channel: size(4), payload,
 * 0xCE. A delivery is the method frame (built here) and those two tails behind
 * a type and channel. Every length read from a record is checked against the
 * record's bounds before a byte it implies is read, in a form that cannot
 * overflow: a record that passes its CRC but does not hold together is a BAD_RECORD. */
#include <string.h>

#include "streams.h"
#include "crc32.h"
#include "bigendian.h"

#define MAGIC 0xA5
#define KIND_MESSAGE 32
#define HEADER_SIZE 8
#define TRAILER_SIZE 4
#define PREFIX 16 /* offset and timestamp */
#define BASIC_DELIVER 0x003C003Cu

/* ---------------------------------------------------------------- copies (big-endian integers: bigendian.h) */

static uint8_t *put(uint8_t *p, const uint8_t *from, size_t n)
{
    memcpy(p, from, n);
    return p + n;
}

/* ---------------------------------------------------------------- one record */

/* Where a sound record's parts are (indexes into buf). */
struct record {
    size_t start;      /* its payload */
    size_t stop;       /* the payload's end (its CRC follows) */
    size_t route_end;  /* exchange and routing key: [start + PREFIX, route_end) */
    size_t header_end; /* the header frame tail: [route_end + 4, header_end); the body's: to stop */
};

/* The record at pos: HUTCH_WANT if it is not whole in buf[pos:end], HUTCH_BAD_RECORD
 * if it does not check out or hold together, else -1 with *rec filled in. */
static int record_at(const uint8_t *buf, size_t end, size_t pos, struct record *rec)
{
    const uint8_t *r = buf + pos;
    uint32_t seed, length, header_size;
    size_t start, stop, key_at, route_end, tail;
    if (pos > end || end - pos < HEADER_SIZE)
        return HUTCH_WANT;
    seed = hutch_crc32(r + 1, 5, 0);
    if (r[0] != MAGIC || r[1] != KIND_MESSAGE || (seed & 0xFFFF) != ((uint32_t)r[6] << 8 | r[7]))
        return HUTCH_BAD_RECORD;
    length = get32(r + 2);
    start = pos + HEADER_SIZE;
    if (end - start < TRAILER_SIZE || length > end - start - TRAILER_SIZE)
        return HUTCH_WANT;
    stop = start + length;
    if (length < PREFIX + 2 || hutch_crc32(buf + start, length, seed) != get32(buf + stop))
        return HUTCH_BAD_RECORD;
    key_at = start + PREFIX + 1 + buf[start + PREFIX];
    if (key_at >= stop)
        return HUTCH_BAD_RECORD;
    route_end = key_at + 1 + buf[key_at];
    if (route_end > stop || stop - route_end < 4)
        return HUTCH_BAD_RECORD;
    header_size = get32(buf + route_end);
    if (header_size > stop - route_end - 4)
        return HUTCH_BAD_RECORD;
    tail = stop - route_end - 4 - header_size;
    if (tail > 0 && tail < 5)
        return HUTCH_BAD_RECORD;
    rec->start = start;
    rec->stop = stop;
    rec->route_end = route_end;
    rec->header_end = route_end + 4 + header_size;
    return -1;
}

/* The bytes of one delivery's frames. */
static uint64_t frames_size(const struct record *rec, size_t tag_len, uint64_t max_payload)
{
    uint64_t size = 21 + tag_len + (rec->route_end - rec->start - PREFIX) + 3 + (rec->header_end - rec->route_end - 4);
    uint64_t tail = rec->stop - rec->header_end;
    uint64_t body = tail ? tail - 5 : 0;
    if (body == 0)
        return size;
    if (body <= max_payload)
        return size + 3 + tail;
    return size + body + 8 * ((body + max_payload - 1) / max_payload);
}

static uint8_t *write_frames(uint8_t *p, const uint8_t *buf, const struct record *rec, unsigned number,
                             const uint8_t *tag_ss, size_t tag_len, uint64_t tag, uint64_t max_payload)
{
    size_t route_start = rec->start + PREFIX;
    size_t route_len = rec->route_end - route_start;
    size_t header_start = rec->route_end + 4;
    size_t tail = rec->stop - rec->header_end;
    /* basic.deliver: consumer-tag, delivery-tag, redelivered (false), exchange, routing-key */
    *p++ = 1;
    p = put16(p, number);
    p = put32(p, (uint32_t)(13 + tag_len + route_len));
    p = put32(p, BASIC_DELIVER);
    p = put(p, tag_ss, tag_len);
    p = put32(p, (uint32_t)(tag >> 32));
    p = put32(p, (uint32_t)tag);
    *p++ = 0;
    p = put(p, buf + route_start, route_len);
    *p++ = 0xCE;
    *p++ = 2;
    p = put16(p, number);
    p = put(p, buf + header_start, rec->header_end - header_start);
    if (tail > 5 && tail - 5 <= max_payload) {
        *p++ = 3;
        p = put16(p, number);
        p = put(p, buf + rec->header_end, tail);
    } else if (tail > 5) { /* a body larger than a frame: frames of max_payload bytes */
        size_t at = rec->header_end + 4;
        size_t body_end = rec->stop - 1;
        while (at < body_end) {
            size_t n = body_end - at < max_payload ? body_end - at : (size_t)max_payload;
            *p++ = 3;
            p = put16(p, number);
            p = put32(p, (uint32_t)n);
            p = put(p, buf + at, n);
            *p++ = 0xCE;
            at += n;
        }
    }
    return p;
}

/* ---------------------------------------------------------------- a run of them */

size_t hutch_stream_deliveries(const uint8_t *buf, size_t end, uint64_t *state, uint64_t visible,
                               uint64_t count, uint64_t space, unsigned number, const uint8_t *tag_ss,
                               size_t tag_len, uint64_t tag, uint64_t max_payload, uint8_t *out,
                               size_t capacity)
{
    size_t pos = (size_t)state[HUTCH_S_POS];
    uint64_t offset = state[HUTCH_S_OFFSET];
    uint64_t after_ms = state[HUTCH_S_AFTER_MS];
    uint64_t given = 0, made = 0;
    uint8_t *p = out;
    int status = HUTCH_DONE;
    if (max_payload == 0)
        max_payload = 1; /* (a connection's is frame_max - 8, never 0: no division by it) */
    while (given < count && made < space) {
        struct record rec;
        uint64_t record, stamp, size;
        int found = record_at(buf, end, pos, &rec);
        if (found >= 0) {
            status = found;
            break;
        }
        record = get64(buf + rec.start);
        stamp = get64(buf + rec.start + 8);
        if (record < offset) {
            pos = rec.stop + TRAILER_SIZE; /* before where this consumer reads from */
            continue;
        }
        if (record >= visible) {
            offset = record; /* not durable yet */
            break;
        }
        if (after_ms && stamp < after_ms) {
            pos = rec.stop + TRAILER_SIZE;
            offset = record + 1;
            continue;
        }
        size = frames_size(&rec, tag_len, max_payload);
        if (size > capacity - (size_t)(p - out)) {
            status = HUTCH_OUT_FULL;
            break;
        }
        p = write_frames(p, buf, &rec, number, tag_ss, tag_len, tag, max_payload);
        pos = rec.stop + TRAILER_SIZE;
        offset = record + 1;
        after_ms = 0;
        made += size;
        given++;
        tag++;
    }
    state[HUTCH_S_POS] = pos;
    state[HUTCH_S_OFFSET] = offset;
    state[HUTCH_S_AFTER_MS] = after_ms;
    state[HUTCH_S_GIVEN] = given;
    state[HUTCH_S_STATUS] = (uint64_t)status;
    return (size_t)(p - out);
}

/* hutch C accelerator: finding a run's messages in a segment read (see messages.h).
 *
 * A record is 0xA5 kind(1) length(4) check(2) payload(length) crc32(4), integers
 * big-endian (core/store/records.py). Every length comes from the file, so each one is
 * checked against what is left in the buffer before a byte it implies is read,
 * in a form that cannot overflow. */
#include "messages.h"
#include "crc32.h"
#include "bigendian.h"

#define RECORD_MAGIC 0xA5
#define RECORD_HEADER 8
#define RECORD_TRAILER 4
#define MAX_PAYLOAD 0x7FFFFFFFu
#define KIND_MESSAGE 9  /* MESSAGE in core/store/journal.py */
#define ID_SIZE 8       /* a message's id: the first bytes of its payload */
#define FIXED_SIZE 17   /* id(8) flags(1) arrival(8), then the route */
#define HEADER_TAIL_MIN 19  /* a content header frame's tail: size(4), class to property flags(14), frame end */

static int all_zero(const uint8_t *buf, size_t len, size_t from)
{
    for (; from < len; from++)
        if (buf[from])
            return 0;
    return 1;
}

/* The record at pos (pos < len), as next_record reads it: its kind, with its payload
 * in [*start, *end); or minus the status that has no good record there (*size: the
 * whole size of a sound record that goes on past len, 0 if its header does). */
static int record_at(const uint8_t *buf, size_t len, size_t pos, size_t *start, size_t *end, uint64_t *size)
{
    const uint8_t *header = buf + pos;
    uint32_t length, crc;
    uint64_t whole;
    *size = 0;
    if (len - pos < RECORD_HEADER)
        return header[0] == RECORD_MAGIC || header[0] == 0 ? -HUTCH_INCOMPLETE : -HUTCH_CORRUPT;
    crc = hutch_crc32(header + 1, 5, 0);  /* kind and length: a damaged length is not believed */
    if (header[0] != RECORD_MAGIC || (crc & 0xFFFF) != (((uint32_t)header[6] << 8) | header[7]))
        return all_zero(buf, len, pos) ? -HUTCH_TORN : -HUTCH_CORRUPT;
    length = get32(header + 2);
    if (length > MAX_PAYLOAD)
        return -HUTCH_CORRUPT;
    whole = (uint64_t)RECORD_HEADER + length + RECORD_TRAILER;
    if (whole > len - pos) {
        *size = whole;  /* a sound header: its record was being written */
        return -HUTCH_INCOMPLETE;
    }
    *start = pos + RECORD_HEADER;
    *end = *start + length;
    if (hutch_crc32(buf + *start, length, crc) != get32(buf + *end))
        /* a bad last record is a torn write; a bad one with good data after it is damage */
        return all_zero(buf, len, *end + RECORD_TRAILER) ? -HUTCH_TORN : -HUTCH_CORRUPT;
    return header[1];
}

/* message_fields of core/store/journal.py: the fields of the MESSAGE payload p[start:end]
 * into out (HUTCH_FIELDS numbers), or 0 when they do not fit in it. */
static int message_fields(const uint8_t *p, size_t start, size_t end, uint64_t *out)
{
    size_t route, key, names, at, header;
    uint64_t body;
    unsigned count, i;
    if (end - start <= FIXED_SIZE)
        return 0;
    route = start + FIXED_SIZE;
    key = route + 1 + p[route];  /* past the exchange */
    if (key >= end)
        return 0;
    names = key + 1 + p[key];  /* past the routing key */
    if (names >= end || end - names < 2)
        return 0;
    count = ((unsigned)p[names] << 8) | p[names + 1];
    at = names + 2;
    for (i = 0; i < count; i++) {
        if (at >= end)
            return 0;
        at += 1 + p[at];
    }
    if (at > end || end - at < 4)
        return 0;
    header = at + 4;
    body = (uint64_t)header + get32(p + at);
    if (body > end || body - header < HEADER_TAIL_MIN)
        return 0;
    out[0] = get64(p + start);
    out[1] = p[start + ID_SIZE];
    out[2] = get64(p + start + ID_SIZE + 1);
    out[3] = route;
    out[4] = key;
    out[5] = names;
    out[6] = header;
    out[7] = body;
    out[8] = end;
    return 1;
}

static size_t stop_at(uint64_t *outcome, size_t pos, int status, uint64_t size, size_t found)
{
    outcome[HUTCH_FOUND_STOP] = pos;
    outcome[HUTCH_FOUND_STATUS] = (uint64_t)status;
    outcome[HUTCH_FOUND_SIZE] = size;
    return found;
}

size_t hutch_find_messages(const uint8_t *buf, size_t len, size_t pos, uint64_t first_id,
                           uint8_t *bitmap, size_t bitmap_len, size_t want,
                           uint64_t *fields, uint64_t *outcome)
{
    size_t found = 0;
    while (pos < len && found < want) {
        size_t start = 0, end = 0;
        uint64_t size, index;
        int kind = record_at(buf, len, pos, &start, &end, &size);
        if (kind < 0)
            return stop_at(outcome, pos, -kind, size, found);
        if (kind == KIND_MESSAGE) {
            if (end - start < ID_SIZE)
                return stop_at(outcome, pos, HUTCH_CORRUPT, 0, found);
            index = get64(buf + start);
            if (index >= first_id) {
                index -= first_id;
                /* a dense run (no bitmap): its ids one after the other, the next one only */
                if (bitmap_len ? (index >> 3) < bitmap_len && (bitmap[index >> 3] & (1u << (index & 7)))
                               : index == found) {
                    if (!message_fields(buf, start, end, fields + found * HUTCH_FIELDS))
                        return stop_at(outcome, pos, HUTCH_CORRUPT, 0, found);
                    if (bitmap_len)
                        bitmap[index >> 3] ^= (uint8_t)(1u << (index & 7));
                    found++;
                }
            }
        }
        pos = end + RECORD_TRAILER;
    }
    return stop_at(outcome, pos, HUTCH_CLEAN, 0, found);
}

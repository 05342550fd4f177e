/* hutch C accelerator: runs of alike publishes for queues (see runs.h). */
#include <string.h>

#include "bigendian.h"
#include "runs.h"

/* Whether the properties from `at` on of a content header payload p[0:len] whose property flags
 * are `flags` end exactly at len: those after the headers table, the only ones a run lets
 * differ (fixed_length in amqp091/batch.py keeps reply-to, expiration, user-id and a further
 * flag word alike). Each is stepped over by its length; what is cut short or overlong is no
 * part of a run, and goes one by one, to codec/wire.py check_property_list's frame error. */
static int properties_end_at(const uint8_t *p, size_t at, size_t len, unsigned flags)
{
    unsigned bit;
    for (bit = 0x1000; bit >= 0x0004; bit >>= 1) {
        if (!(flags & bit))
            continue;
        if (bit == 0x1000 || bit == 0x0800) /* delivery-mode, priority: an octet */
            at += 1;
        else if (bit == 0x0040) /* timestamp: 8 octets */
            at += 8;
        else if (at < len) /* a shortstr */
            at += 1 + (size_t)p[at];
        else
            return 0;
        if (at > len)
            return 0;
    }
    return at == len;
}

int hutch_publish_alike(const uint8_t *buf, const uint64_t *rec, unsigned number, const uint8_t *method,
                        size_t method_len, const uint8_t *header, size_t header_len, size_t fixed_len,
                        uint64_t *body_size, size_t *header_size)
{
    size_t payload = (size_t)rec[HUTCH_R_PAYLOAD_START], end = (size_t)rec[HUTCH_R_PAYLOAD_END];
    size_t header_at = end + 8, header_end = (size_t)rec[HUTCH_R_HEADER_END], size;
    unsigned flags;
    if (rec[HUTCH_R_TYPE] != HUTCH_R_PUBLISH || rec[HUTCH_R_CHANNEL] != number)
        return 0;
    if (end - payload < 6 || end - payload - 6 != method_len || memcmp(buf + payload + 6, method, method_len) != 0)
        return 0;
    if (fixed_len > header_len || fixed_len < HUTCH_PROPERTIES_AT)
        return 0;
    size = header_end - header_at;
    if (fixed_len == header_len ? size != header_len : size < fixed_len)
        return 0;
    if (memcmp(buf + header_at, header, HUTCH_BODY_SIZE_AT) != 0
        || memcmp(buf + header_at + HUTCH_PROPERTIES_AT, header + HUTCH_PROPERTIES_AT,
                  fixed_len - HUTCH_PROPERTIES_AT) != 0)
        return 0;
    flags = ((unsigned)header[12] << 8) | header[13];
    if (fixed_len != header_len && !properties_end_at(buf + header_at, fixed_len, size, flags))
        return 0;
    /* The delivery-mode, the first property after the headers table, is alike too: the journal
     * is asked of a run's first publish (core/runs.py journalled), and a persistent one then
     * transient ones journalled them all; a transient one first, none of the persistent ones. */
    if (fixed_len != header_len && (flags & 0x1000) && buf[header_at + fixed_len] != header[fixed_len])
        return 0;
    *body_size = get64(buf + header_at + HUTCH_BODY_SIZE_AT);
    *header_size = size;
    return 1;
}

void hutch_alike_publishes(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                           const uint8_t *method, size_t method_len, const uint8_t *header,
                           size_t header_len, size_t fixed_len, uint64_t max_body, size_t max_count,
                           uint64_t *outcome)
{
    size_t taken = 0, next = 0, header_size;
    uint64_t bytes = 0, body_size;
    while (taken < count && taken < max_count) {
        const uint64_t *rec = records + taken * HUTCH_R_SLOTS;
        if (!hutch_publish_alike(buf, rec, number, method, method_len, header, header_len, fixed_len, &body_size,
                                 &header_size)
            || body_size > max_body)
            break;
        bytes += body_size + header_size + 5; /* the header frame's tail: size(4), payload, frame-end */
        taken++;
        next = (size_t)rec[HUTCH_R_BODY_END] + 1;
    }
    outcome[HUTCH_RUN_COUNT] = taken;
    outcome[HUTCH_RUN_NEXT] = next;
    outcome[HUTCH_RUN_BYTES] = bytes;
}

size_t hutch_queue_deliveries(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                              const uint8_t *tag_ss, size_t tag_len, uint64_t tag, const uint8_t *route,
                              size_t route_len, uint64_t max_payload, uint64_t space, uint8_t *out,
                              size_t capacity, uint64_t *outcome)
{
    static const uint8_t deliver_id[4] = {0, 60, 0, 60}; /* basic.deliver */
    uint8_t *p = out;
    size_t given = 0, method_size = 13 + tag_len + route_len;
    uint64_t used = 0;
    int status = HUTCH_RUN_DONE;
    while (given < count && used < space) {
        const uint64_t *rec = records + given * HUTCH_R_SLOTS;
        size_t header_from = (size_t)rec[HUTCH_R_PAYLOAD_END] + 4; /* the header frame's size */
        size_t header_end = (size_t)rec[HUTCH_R_HEADER_END], body_end = (size_t)rec[HUTCH_R_BODY_END];
        size_t header_len = header_end + 1 - header_from, body_len = 0;
        uint64_t body_size = get64(buf + header_from + 4 + HUTCH_BODY_SIZE_AT);
        size_t need;
        if (body_size > max_payload)
            break;
        if (body_size)
            body_len = body_end + 1 - (header_end + 4);
        need = 8 + method_size + 3 + header_len + (body_size ? 3 + body_len : 0);
        if (need > capacity - (size_t)(p - out)) {
            status = HUTCH_RUN_OUT_FULL;
            break;
        }
        *p++ = 1;
        p = put16(p, number);
        p = put32(p, (uint32_t)method_size);
        memcpy(p, deliver_id, 4);
        p += 4;
        memcpy(p, tag_ss, tag_len);
        p += tag_len;
        p = put64(p, tag);
        *p++ = 0; /* redelivered */
        memcpy(p, route, route_len);
        p += route_len;
        *p++ = 0xCE;
        *p++ = 2;
        p = put16(p, number);
        memcpy(p, buf + header_from, header_len);
        p += header_len;
        if (body_size) {
            *p++ = 3;
            p = put16(p, number);
            memcpy(p, buf + header_end + 4, body_len);
            p += body_len;
        }
        used += body_size + 64;
        tag++;
        given++;
    }
    outcome[HUTCH_RUN_COUNT] = given;
    outcome[HUTCH_RUN_BYTES] = used;
    outcome[HUTCH_RUN_STATUS] = (uint64_t)status;
    return (size_t)(p - out);
}

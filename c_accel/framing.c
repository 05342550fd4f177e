/* hutch C accelerator: the batch frame scanner (see framing.h).
 *
 * A frame is type(1) channel(2) size(4), size octets of payload, 0xCE. Every
 * length comes from the wire, so each one is checked against what is left in
 * the buffer before a byte it implies is read, in a form that cannot overflow. */
#include "framing.h"
#include "bigendian.h"

#define FRAME_HEADER_SIZE 7
#define FRAME_END 0xCE
#define FRAME_OK -1   /* frame_at: a whole, sound frame (not one of the scan statuses) */

static void stop_at(size_t *outcome, size_t pos, size_t status, size_t detail)
{
    outcome[HUTCH_STOP] = pos;
    outcome[HUTCH_STATUS] = status;
    outcome[HUTCH_DETAIL] = detail;
}

/* The frame at pos, if it is whole and sound: its type, channel and payload
 * [*payload, *end) (end = index of its frame-end octet). Otherwise the status a
 * scan stops with there (outcome gets the detail), or NEED_MORE when it has not
 * all arrived. */
static int frame_at(const uint8_t *buf, size_t len, size_t pos, int64_t max_payload,
                    size_t *payload, size_t *end, size_t *detail)
{
    const uint8_t *header;
    uint32_t size;
    if (pos > len || len - pos < FRAME_HEADER_SIZE)
        return HUTCH_NEED_MORE;
    header = buf + pos;
    size = ((uint32_t)header[3] << 24) | ((uint32_t)header[4] << 16)
         | ((uint32_t)header[5] << 8) | (uint32_t)header[6];
    /* max_payload is signed and 64-bit so that any value the connection may hold
     * (frame_max - 8, frame_max up to 2^32 - 1) compares as it does in Python */
    if ((int64_t)size > max_payload) {
        *detail = size;
        return HUTCH_OVERSIZE;
    }
    /* the frame-end octet sits at pos + 7 + size: it must be inside the buffer */
    if (size >= len - pos - FRAME_HEADER_SIZE)
        return HUTCH_NEED_MORE;
    *payload = pos + FRAME_HEADER_SIZE;
    *end = *payload + size;
    if (buf[*end] != FRAME_END) {
        *detail = buf[*end];
        return HUTCH_BAD_FRAME_END;
    }
    return FRAME_OK;
}

static size_t channel_of(const uint8_t *buf, size_t pos)
{
    return ((size_t)buf[pos + 1] << 8) | buf[pos + 2];
}

/* Whether the method frame [payload, end) is a basic.publish whose content (a header
 * and, unless the body is empty, exactly one body frame holding all of it) follows
 * whole and sound on the same channel. If so, *header_end and *body_end get the
 * frame-end indexes of the last two frames (equal when there is no body frame).
 * Anything else is left to the frame-by-frame records: this only groups, the
 * connection still checks every field. */
static int whole_publish(const uint8_t *buf, size_t len, size_t frame, size_t payload, size_t end,
                         int64_t max_payload, size_t *header_end, size_t *body_end)
{
    size_t channel = channel_of(buf, frame), header_payload, body_payload, detail;
    uint64_t body_size;
    if (end - payload < 4 || buf[payload] != 0 || buf[payload + 1] != 60
        || buf[payload + 2] != 0 || buf[payload + 3] != 40)
        return 0;
    if (frame_at(buf, len, end + 1, max_payload, &header_payload, header_end, &detail) != FRAME_OK
        || buf[end + 1] != 2 || channel_of(buf, end + 1) != channel
        || *header_end - header_payload < 12)
        return 0;
    body_size = get64(buf + header_payload + 4);
    if (body_size == 0) {
        *body_end = *header_end;
        return 1;
    }
    if (frame_at(buf, len, *header_end + 1, max_payload, &body_payload, body_end, &detail) != FRAME_OK
        || buf[*header_end + 1] != 3 || channel_of(buf, *header_end + 1) != channel)
        return 0;
    return (uint64_t)(*body_end - body_payload) == body_size;
}

/* The method id (class << 16 | method) of a basic.ack, basic.nack or basic.reject
 * frame with exactly its arguments (delivery tag, one octet of bits), else 0. */
static uint32_t settlement(const uint8_t *buf, size_t payload, size_t end)
{
    uint32_t id;
    if (end - payload != 4 + 8 + 1)
        return 0;
    id = ((uint32_t)buf[payload] << 24) | ((uint32_t)buf[payload + 1] << 16)
       | ((uint32_t)buf[payload + 2] << 8) | buf[payload + 3];
    return id == 0x003C0050 || id == 0x003C0078 || id == 0x003C005A ? id : 0;
}

size_t hutch_scan_frames(const uint8_t *buf, size_t len, size_t pos, int64_t max_payload,
                         uint64_t *records, size_t capacity, size_t *outcome)
{
    size_t count = 0;
    for (;;) {
        size_t payload, end, header_end, body_end, detail = 0;
        uint64_t *record;
        int status;
        if (pos <= len && len - pos >= FRAME_HEADER_SIZE && count == capacity) {
            stop_at(outcome, pos, HUTCH_FULL, 0);
            return count;
        }
        status = frame_at(buf, len, pos, max_payload, &payload, &end, &detail);
        if (status != FRAME_OK) {
            stop_at(outcome, pos, status, detail);
            return count;
        }
        record = records + count * HUTCH_RECORD_SLOTS;
        record[HUTCH_CHANNEL] = channel_of(buf, pos);
        record[HUTCH_PAYLOAD_START] = payload;
        record[HUTCH_PAYLOAD_END] = end;
        if (buf[pos] == 1 && whole_publish(buf, len, pos, payload, end, max_payload, &header_end, &body_end)) {
            record[HUTCH_TYPE] = HUTCH_PUBLISH;
            record[HUTCH_HEADER_END] = header_end;
            record[HUTCH_BODY_END] = body_end;
            pos = body_end + 1;
        } else if (buf[pos] == 1 && settlement(buf, payload, end)) {
            record[HUTCH_TYPE] = HUTCH_SETTLE;
            record[HUTCH_METHOD_ID] = settlement(buf, payload, end);
            record[HUTCH_DELIVERY_TAG] = get64(buf + payload + 4);
            pos = end + 1;
        } else {
            record[HUTCH_TYPE] = buf[pos];
            record[HUTCH_HEADER_END] = 0;
            record[HUTCH_BODY_END] = 0;
            pos = end + 1;
        }
        count++;
    }
}

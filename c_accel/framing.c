/* hutch C accelerator: the batch frame scanner (see framing.h).
 *
 * A frame is type(1) channel(2) size(4), size octets of payload, 0xCE. Every
 * length comes from the wire, so each one is checked against what is left in
 * the buffer before a byte it implies is read, in a form that cannot overflow. */
#include "framing.h"

#define FRAME_HEADER_SIZE 7
#define FRAME_END 0xCE

static void stop_at(size_t *outcome, size_t pos, size_t status, size_t detail)
{
    outcome[HUTCH_STOP] = pos;
    outcome[HUTCH_STATUS] = status;
    outcome[HUTCH_DETAIL] = detail;
}

size_t hutch_scan_frames(const uint8_t *buf, size_t len, size_t pos, int64_t max_payload,
                         size_t *records, size_t capacity, size_t *outcome)
{
    size_t count = 0;

    /* pos past the end: nothing to scan (the Python reference behaves the same) */
    while (pos <= len && len - pos >= FRAME_HEADER_SIZE) {
        const uint8_t *header = buf + pos;
        uint32_t size;
        size_t end;
        size_t *record;

        if (count == capacity) {
            stop_at(outcome, pos, HUTCH_FULL, 0);
            return count;
        }
        size = ((uint32_t)header[3] << 24) | ((uint32_t)header[4] << 16)
             | ((uint32_t)header[5] << 8) | (uint32_t)header[6];
        /* max_payload is signed and 64-bit so that any value the connection may hold
         * (frame_max - 8, frame_max up to 2^32 - 1) compares as it does in Python */
        if ((int64_t)size > max_payload) {
            stop_at(outcome, pos, HUTCH_OVERSIZE, size);
            return count;
        }
        /* the frame-end octet sits at pos + 7 + size: it must be inside the buffer */
        if (size >= len - pos - FRAME_HEADER_SIZE)
            break;
        end = pos + FRAME_HEADER_SIZE + size;
        if (buf[end] != FRAME_END) {
            stop_at(outcome, pos, HUTCH_BAD_FRAME_END, buf[end]);
            return count;
        }
        record = records + count * HUTCH_RECORD_SLOTS;
        record[HUTCH_TYPE] = header[0];
        record[HUTCH_CHANNEL] = ((size_t)header[1] << 8) | header[2];
        record[HUTCH_PAYLOAD_START] = pos + FRAME_HEADER_SIZE;
        record[HUTCH_PAYLOAD_END] = end;
        count++;
        pos = end + 1;
    }
    stop_at(outcome, pos, HUTCH_NEED_MORE, 0);
    return count;
}

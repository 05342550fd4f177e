/* hutch C accelerator: a run of whole publishes into a stream's records.
 *
 * What core/streams/stream.py's append() (with core/streams/streamlog.py's message_record) makes of
 * each publish, one publish after the other, made here for a run of them in one call:
 * the records are byte for byte those, and tests/accel/test_accel_appends.py checks it by
 * feeding the same publishes to a broker that appends runs and to one that does not. */
#ifndef HUTCH_APPENDS_H
#define HUTCH_APPENDS_H

#include <stddef.h>
#include <stdint.h>

/* The outcome slots. */
enum { HUTCH_A_TAKEN = 0, HUTCH_A_NEXT = 1, HUTCH_A_SLOTS = 2 };

/* The records, into out[0:capacity], of the publishes the frame scanner found
 * (records: RECORD_SLOTS numbers each, from the run's first on, count of them) as
 * long as each is a whole publish on channel `number` whose method arguments after
 * the ticket are method[0:method_len] and whose content header payload is
 * header[0:header_len] but for its body size (at most max_body): runs.h's
 * hutch_publish_alike, with fixed_len (the properties after it may differ from publish
 * to publish: each record then holds its publish's own, and `after` is the first's). Each record gets
 * the next offset from `offset` on and timestamp_ms; its payload after those is
 * prefix (with the body size written at body_size_at) + offset + after + the
 * body frame's tail. Stops before a publish that differs, after max_count records,
 * or before a record that would take the bytes written past budget or capacity.
 * Returns the bytes written; outcome gets how many publishes were taken and where
 * the frame after the last of them starts. */
size_t hutch_stream_appends(const uint8_t *buf, size_t len, const uint64_t *records, size_t count,
                            unsigned number, const uint8_t *method, size_t method_len,
                            const uint8_t *header, size_t header_len, size_t fixed_len, uint64_t max_body,
                            const uint8_t *prefix, size_t prefix_len, size_t body_size_at,
                            const uint8_t *after, size_t after_len, uint64_t offset,
                            uint64_t timestamp_ms, size_t max_count, size_t budget, uint8_t *out,
                            size_t capacity, uint64_t *outcome);

#endif

/* hutch C accelerator: runs of alike publishes, as the frame scanner (framing.c) records them.
 *
 * A publisher sends run after run of publishes with the same exchange, routing key and
 * properties (a sensor's readings): what tells whether a publish belongs to a run is
 * hutch_publish_alike, the one copy of that rule (appends.c makes a stream's records of a
 * run; this file finds a run for a queue and makes its deliveries). The broker's one
 * publish path (Broker.publish_run in core/broker.py) decides whether a run may go
 * together; its reference is the one-by-one path, which must send and store the same
 * bytes (tests/accel/test_accel_runs.py, tests/accel/test_accel_appends.py). */
#ifndef HUTCH_RUNS_H
#define HUTCH_RUNS_H

#include <stddef.h>
#include <stdint.h>

/* amqp091/framing.py's record slots and the record type of a whole publish. */
#define HUTCH_R_SLOTS 6
#define HUTCH_R_TYPE 0
#define HUTCH_R_CHANNEL 1
#define HUTCH_R_PAYLOAD_START 2
#define HUTCH_R_PAYLOAD_END 3
#define HUTCH_R_HEADER_END 4
#define HUTCH_R_BODY_END 5
#define HUTCH_R_PUBLISH 256

/* A content header payload: class(2) weight(2) body size(8) flags and properties. */
#define HUTCH_BODY_SIZE_AT 4
#define HUTCH_PROPERTIES_AT 12

/* Whether the publish recorded at rec is like the run's first: a whole publish on channel
 * `number` whose method arguments after the ticket are method[0:method_len] and whose content
 * header payload is header[0:fixed_len] but for its body size; when fixed_len is header_len
 * its header has that length too, else at least fixed_len (the properties after fixed_len,
 * which the caller lets differ, are each publish's own, and must end where its header does).
 * Its body size goes to *body_size, its header payload's length to *header_size. The indexes
 * in rec come from the scanner, which checked them against the buffer. */
int hutch_publish_alike(const uint8_t *buf, const uint64_t *rec, unsigned number, const uint8_t *method,
                        size_t method_len, const uint8_t *header, size_t header_len, size_t fixed_len,
                        uint64_t *body_size, size_t *header_size);

/* The outcome slots of hutch_alike_publishes and hutch_queue_deliveries. */
enum { HUTCH_RUN_COUNT = 0, HUTCH_RUN_NEXT = 1, HUTCH_RUN_BYTES = 2, HUTCH_RUN_STATUS = 3, HUTCH_RUN_SLOTS = 4 };
/* Why hutch_queue_deliveries stopped (HUTCH_RUN_STATUS). */
enum { HUTCH_RUN_DONE = 0, HUTCH_RUN_OUT_FULL = 1 };

/* How many of the count publishes recorded from records on are alike (hutch_publish_alike),
 * each body at most max_body, at most max_count: outcome gets that count, where the frame
 * after the last of them starts, and the bytes of their content (body sizes plus header
 * frame tails: what core/message.py counts of a message). */
void hutch_alike_publishes(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                           const uint8_t *method, size_t method_len, const uint8_t *header,
                           size_t header_len, size_t fixed_len, uint64_t max_body, size_t max_count,
                           uint64_t *outcome);

/* The basic.deliver frames, into out[0:capacity], of the first publishes recorded from records
 * on (count of them, alike: hutch_alike_publishes took them) to the consumer whose tag is the
 * shortstr tag_ss on channel `number`, delivery tags from `tag` on, route (exchange and routing
 * key, shortstrs) in each: the method frame, then the publish's own content header and body
 * frames with the channel's number in place of the publisher's (amqp091/output.py deliver()
 * makes the same, one at a time). A delivery may start while the bytes counted so far (body
 * size + 64 each, as output.deliver counts them) are below space; stops before a body larger
 * than max_payload (output.py cuts it into frames), or one that does not fit in out (status
 * HUTCH_RUN_OUT_FULL). Returns the bytes written; outcome gets how many were made and the bytes
 * they count. */
size_t hutch_queue_deliveries(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                              const uint8_t *tag_ss, size_t tag_len, uint64_t tag, const uint8_t *route,
                              size_t route_len, uint64_t max_payload, uint64_t space, uint8_t *out,
                              size_t capacity, uint64_t *outcome);

#endif

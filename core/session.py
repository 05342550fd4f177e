"""The contracts between the broker and its front ends, written down once.

A front end (the 0-9-1 connection and its channels, amqp091/; an AMQP 1.0 connection, its
sessions and links, amqp10/; an MQTT connection and its session, mqtt/; the bridge's local
sides, core/bridge/) speaks its protocol to its peer and these to the broker.
Each is the set of attributes and methods the broker calls, and core/broker.py, core/queue.py
and core/streams/stream.py call no others. Nothing here is a class to inherit: the broker's own side (a
bridge's local sides, the devices, the commands, an MQTT session's held messages) writes the
few defaults it needs out (confirming, closed, stats None, prefetch_global 0, ...), as the
front ends write theirs: on a board a module of base classes cost 1.1 to 1.3 KiB of heap
wherever it was loaded, more than the lines it saved. Broker.consume,
core/topology.py bind and unbind take the request a refusal names as the front end numbers its
requests, 0 for none (the broker's own side, MQTT): always given, as a Consumer's arguments
are, by position. (On MicroPython a default before a keyword-only argument, or a call by
keyword, leaves garbage a board's heap holds until its next collection: with bind's, the up
bridge scenario of tests/boards/test_wasm32.py took 10 KiB more.)

**Who asks** (`who`): core/auth.py `Login`, one per logged-in connection (its user and
name), or None for the broker itself (dead-lettering, recovery, a bridge's local side).
Every broker and topology call a client makes names it: Broker.admit (through its
publisher), Broker.consume and Broker.get, and core/topology.py's declare, delete, bind and
unbind. It owns the exclusive queues it declares. The one check made of it today is
core/topology.py check_exclusive.

**A publisher** (what Broker.admit and publish, and core/runs.py publish_run, are given):

    publisher.client               who publishes (its user is checked against user-id)
    publisher.stats                its front end's counters (core/counters.py; None: the broker's)
    publisher.confirming           it can be told no (a nack): a full queue or blocked
                                   publishers refuse its message rather than hold it back
    publisher.hold_for(queue)      (no confirms) stop taking its publishes until queue has
                                   room (Queue.hold keeps it in queue.waiting until then);
                                   true if it keeps this publish back and publishes it again
                                   at resume (Broker.publish takes nothing of it: HELD), false
                                   if it cannot (a transaction's commit, a will): then taken
    publisher.held_by              the queues it waits for (core/queue.py stop_waiting)
    publisher.resume()             that queue has room now
    publisher.direct_reply_to(m)   a publish with reply-to amq.rabbitmq.reply-to: the message
                                   that goes instead (or a Refused)

and, to be told when the journal has made its confirms durable (Broker.wait_for_journal):

    waiter.closed, waiter.flush_confirms()   True while some still wait for a later sync

**A session** (where a Consumer's deliveries go: consumer.session; core/queue.py Consumer):

    session.can_deliver()                  it may be given a message now
    session.stats                          its front end's counters (core/counters.py; None: the broker's)
    session.prefetch_global                a bound on what all its consumers hold (0: none)
    session.consumer_unacked               what they hold together
    session.deliver(consumer, queue, entry)           one message; the session calls
                                           Broker.delivered and later Broker.settle
    session.deliver_records(consumer, stream, cursor, room)
                                           (stream queues) up to room of the records the
                                           consumer's cursor has read ahead, in one go:
                                           (how many, why it stopped); each is settled with
                                           stream.entry as its entry
    session.server_cancel(consumer)        the broker ended the consumer (its queue is gone)

**A connection** (its port's side is core/connections.py's), as the broker ticks, tells and counts
it (broker.connections, core/flow.py, core/snapshot.py):

    conn.tick(now), conn.name, conn.client, conn.counted
    conn.close(reason)                     from the broker's side: its shutdown (no reason) or an
                                           operator's (hutch ctl: the reason)
    conn.channels                          its sessions, by number (counted in the snapshot)
    conn.notify_blocked(reason), conn.notify_unblocked(), conn.resume_reading()
    conn.unsettled()                       (queue, entry) of what its sessions hold unsettled

**What the broker refuses** a request with is a codec/errors.py Refused, in no protocol's words
(a condition by RabbitMQ's name, a text, the request refused); each
front end words it in its own: amqp091/replies.py as a reply code and RabbitMQ's text
("NOT_FOUND - no queue 'q' in vhost '/'"), closing the channel or, for a hard error, the
connection; amqp10/links.py as an AMQP 1.0 error condition with the text as its description
(as RabbitMQ 4 does).

**A queue entry**: what a queue holds and hands a session, a tuple read by these names (the
firmware build folds them into the numbers; on CPython, unpack it where speed matters).
"""

MESSAGE = 0  # the core/message.py Message
REDELIVERED = 1  # whether a consumer was given it before
EXPIRES_AT = 2  # when it expires (the broker's ms clock), or None

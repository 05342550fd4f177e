"""The bridge's words: the one vocabulary its upstream clients speak to it, whatever their
protocol (the 1.0 and MQTT clients, amqp10/client.py and mqtt/client.py, on the base they
share, codec/upstream_client.py; the 0-9-1 client through server/bridges/amqp091.py). Words
only: a board's bridge loads nothing else with them.

Events: what a client reads from upstream, as tuples (a board's heap holds a tuple per event;
a class per kind would cost each board a class object and an instance per confirm). The first
item is the event's word, which is also the name of the bridge machine's method that takes
the rest (core/bridge/machine.py, up.py and down.py: machine.accepted(seq, multiple)), so the
driver hands every event on in one line (server/bridges/driver.py):

    ("accepted", seq, multiple)        upstream has the message numbered seq (and, multiple,
                                       every one before it): a confirm, 1.0's accepted, a PUBACK
    ("rejected", seq, multiple, why)   it refused it (basic.nack, 1.0's rejected, a 5.0 PUBACK
                                       error): the bridge sends it again after a pause
    ("released", seq, multiple, why)   1.0's released or modified: sent again
    ("returned", headers, code, text)  0-9-1's basic.return of a mandatory message (its
                                       confirm follows and puts it back)
    ("delivered", tag, exchange, routing_key, header_tail, body_tail, body_size)
                                       a message from upstream (a down bridge): the machine
                                       says whether to refuse it, (tag, requeue), or None
    ("backlog", count)                 the upstream queue's count, answered at the set-up
    ("flow", active)                   0-9-1's channel.flow
    ("blocked", why), ("unblocked",)   upstream holds its publishers back, lets them go
    ("ended", reason, condition)       the link, session or connection ended, or the login was
                                       refused (condition: the peer's, where it gave one)

Set-up steps: what the machine asks of a link before it runs, in these words, one at a time
(a driver's set_up(step); the next once the client awaits no reply): a protocol whose client
attaches or subscribes by itself (1.0, MQTT) is given none.

    ("exchange", name, kind)           declare the durable exchange
    ("queue", name, arguments)         declare the durable queue (arguments: its x-arguments)
    ("bind", queue, exchange, key)     bind the queue
    ("confirm",)                       ask upstream to confirm each message
    ("has-exchange", name), ("has-queue", name)
                                       check that it exists (a passive declare; "backlog"
                                       answers the second)
    ("prefetch", count)                at most count unacknowledged deliveries
    ("consume", queue, tag)            deliver the queue's messages (acknowledged)
"""

ACCEPTED = "accepted"
REJECTED = "rejected"
RELEASED = "released"
RETURNED = "returned"
DELIVERED = "delivered"
BACKLOG = "backlog"
FLOW = "flow"
BLOCKED = "blocked"
UNBLOCKED = "unblocked"
ENDED = "ended"

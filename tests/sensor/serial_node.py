"""A sensor node talking AMQP over a serial line: `serial_node.py TTY COUNT` under micropython
(MICROPYPATH holding the node bundle plus hutch/ports' serial.py and clock.py) or CPython. The tty is opened with
hutch.ports.uart.open_serial (on a board it would be machine.UART(..., timeout=0)).

It publishes COUNT readings with confirms to the queue "serial-readings", then takes one
command from "serial-cmd" and acks it. The test holds the other end of the pty.
"""

import sys
import time

from sensor_node import body, say

from hutch.client import Client
from hutch.client.transport import Serial
from hutch.ports.uart import open_serial


def main(path, count):
    count = int(count)
    c = Client(transport=Serial(open_serial(path, 115200)), heartbeat=5, name="serial-sensor")
    c.connect()
    say("connected")
    c.declare_queue("serial-readings")
    c.confirm()
    for i in range(count):
        c.publish("", "serial-readings", body(i), {"message_id": str(i)})
        if i % 20 == 19:
            assert c.wait_confirms(10000), "not confirmed by %d" % i
    assert c.wait_confirms(10000)
    say("confirmed", count)
    got = []
    c.consume("serial-cmd", lambda m: (got.append(m.body), c.ack(m.delivery_tag)), prefetch=1)
    start = time.time()
    while not got:
        assert time.time() - start < 30, "no command"
        c.wait_msg(1000)
    say("cmd", got[0].decode())
    stats = c.transport.link.stats
    c.close()
    say("closed", "retransmits=%d crc_errors=%d" % (stats["retransmits"], stats["crc_errors"]))


if __name__ == "__main__":
    main(*sys.argv[1:])

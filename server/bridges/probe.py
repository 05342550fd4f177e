"""prefer_first's probe (make-before-break fail-back): while a bridge's link runs on a later URI of
its list, a second connection tries an earlier one as far as the link's set-up would go: over
AMQP 0-9-1 the handshake and login, channel.open, confirm.select, and a passive declare of what
the bridge sends to (its exchange, or the queue the default exchange routes its routing key
to); over MQTT the CONNECT and its CONNACK (a clean session, a client id of its own).
Only if all of it answers within the URI's connection_timeout is the machine told that URI
answers (core/bridge/machine.py probe_ended), and the working link then drains and moves; a
probe that gets no answer (a node that accepts and answers nothing: mosquitto#3293's trap),
or a refusal, changes nothing. The probe's connection is closed either way.

Loaded only by a bridge with prefer_first (server/bridges/config.py: up, amqp:// or mqtt:// URIs).
"""

import asyncio

from ...codec.upstream import ENDED
from ...ports.tcp import close_writer

READ_SIZE = 16384
TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any  # noqa: F401 (_probing's type comment)


async def probe_uri(bridge, index, uri):
    """Try URI index of the bridge (its settings), then tell the machine what came of it."""
    answered, why = False, None
    writer = None
    try:
        reader, writer = await asyncio.wait_for(bridge.open(uri), uri["connection_timeout"] / 1000)
        answered = await asyncio.wait_for(_set_up(bridge, uri, reader, writer), uri["connection_timeout"] / 1000)
    except asyncio.TimeoutError:
        why = "no answer within %d ms" % uri["connection_timeout"]
    except (OSError, ProbeRefused) as e:
        why = str(e) or e.__class__.__name__
    except asyncio.CancelledError:
        raise
    finally:
        if writer is not None:
            try:
                await close_writer(writer)
            except OSError:
                pass
    machine = bridge.machine
    if not answered and why and machine.probe_said.get(index) != why:  # (each reason once a URI)
        machine.probe_said[index] = why
        machine.log("info", "bridge %s: %s does not answer a probe yet: %s" % (machine.name, uri["uri"], why))
    machine.probe_ended(index, answered, why)


class ProbeRefused(Exception):
    """Upstream ended the probe's connection or channel: why."""


def _probing(bridge, uri):
    # type: (Any, dict) -> tuple[Any, list, Any]
    """(the protocol connecting, the set-up steps after its handshake, what says goodbye on it):
    its protocol's driver says (probing() of server/bridges/amqp091.py or mqtt.py), and the probe
    drives each alike."""
    frame_max = uri["frame_max"] or bridge.broker.limits.frame_max
    return bridge.protocol_driver(uri).probing(bridge, uri, frame_max, bridge.clock.now_ms())


async def _set_up(bridge, uri, reader, writer):
    """The probe's steps on its connection: True once each answered; ProbeRefused if upstream
    ends the connection or the channel. Then goodbye (what it answers is not waited for)."""
    protocol, steps, goodbye = _probing(bridge, uri)
    pending = b""
    while True:
        while True:  # (taking the events is what runs the handshake: its answers are queued then)
            event = protocol.next_event()
            if event is None:
                break
            if event[0] == ENDED:
                raise ProbeRefused(event[1])
        _flush(protocol, writer)
        await writer.drain()
        if protocol.channel_open and not protocol.awaiting:
            if not steps:
                goodbye()
                _flush(protocol, writer)
                return True
            protocol.set_up(steps.pop(0))
            continue
        if pending:
            pending = pending[protocol.receive_data(pending) :]
            continue
        pending = await reader.read(READ_SIZE)
        if not pending:
            raise ProbeRefused("upstream closed the connection")


def _flush(protocol, writer):
    while True:
        data = protocol.data_to_send()
        if data is None:
            return
        writer.write(bytes(data))

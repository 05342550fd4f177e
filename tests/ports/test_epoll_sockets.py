"""ports/epoll_sockets.py: a listener's sockets on its own epoll set, each a small transport that
calls its protocol as asyncio's transports do. Real sockets on 127.0.0.1, a recording protocol."""

import asyncio
import os
import resource
import socket
import struct

import pytest

from hutch.ports import epoll_sockets


class Recorder(asyncio.Protocol):
    """What the transport told it, in order; `received` holds the octets."""

    def __init__(self, made):
        self.events = []
        self.received = bytearray()
        self.transport = None
        self.lost = asyncio.get_running_loop().create_future()
        made.append(self)

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        self.received += data

    def eof_received(self):
        self.events.append("eof")
        return False

    def pause_writing(self):
        self.events.append("pause_writing")

    def resume_writing(self):
        self.events.append("resume_writing")

    def connection_lost(self, exc):
        self.events.append("lost")
        self.lost.set_result(exc)


class Buffered(Recorder, asyncio.BufferedProtocol):
    """The same through get_buffer/buffer_updated (as ports/tcp_cpython.py's client protocol)."""

    def __init__(self, made):
        super().__init__(made)
        self.buffer = bytearray(100)

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        self.received += self.buffer[:nbytes]


async def listening(kind=Recorder, passes=None):
    loop = asyncio.get_running_loop()
    made = []
    logged = []
    sockets = epoll_sockets.EpollSockets(loop, lambda *line: logged.append(line), passes)
    await sockets.listen("127.0.0.1", 0, lambda: kind(made))
    port = sockets.listening[0].getsockname()[1]
    return sockets, port, made, logged


async def connect(port, made, count=1):
    """A client socket (non-blocking), once the listener has made its protocol."""
    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, ("127.0.0.1", port))
    await until(lambda: len(made) >= count)
    return client


async def until(condition, seconds=5.0):
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within %s s" % seconds)


async def read_all(client, count):
    loop = asyncio.get_running_loop()
    got = bytearray()
    while len(got) < count:
        data = await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5)
        assert data, "the stream ended after %d of %d octets" % (len(got), count)
        got += data
    return bytes(got)


@pytest.mark.parametrize("kind", [Recorder, Buffered], ids=["data_received", "get_buffer"])
def test_what_a_client_sends_reaches_its_protocol_in_order_and_its_end_is_an_eof(kind):
    async def main():
        sockets, port, made, _ = await listening(kind)
        client = await connect(port, made)
        sent = bytes(range(256)) * 40  # (more than one read of the Buffered's 100 octets)
        await asyncio.get_running_loop().sock_sendall(client, sent)
        await until(lambda: len(made[0].received) == len(sent))
        client.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(made[0].lost, 5) is None
        client.close()
        await sockets.wait_closed()
        return made[0]

    protocol = asyncio.run(main())
    assert bytes(protocol.received) == bytes(range(256)) * 40
    assert protocol.events == ["made", "eof", "lost"]


class Keeper(Recorder):
    """Keeps each read as it was given, without copying it."""

    def __init__(self, made):
        super().__init__(made)
        self.reads = []

    def data_received(self, data):
        self.reads.append(data)
        self.received += data


def test_what_an_unbuffered_protocol_is_given_stays_as_it_was_read():
    """The reads of protocols without get_buffer (the TLS layer) share one buffer in the port:
    each read is handed over as bytes of its own, so what a protocol keeps of an earlier read is
    not overwritten by the next read, of its own socket or another's."""

    async def main():
        sockets, port, made, _ = await listening(Keeper)
        first = await connect(port, made)
        second = await connect(port, made, 2)
        loop = asyncio.get_running_loop()
        for i in range(20):
            for n, client in enumerate((first, second)):
                await loop.sock_sendall(client, bytes([n * 100 + i]) * (100 + i))
                sent = sum(100 + j for j in range(i + 1))
                await until(lambda keeper=made[n], sent=sent: sum(map(len, keeper.reads)) == sent)
        for client in (first, second):
            client.close()
        await asyncio.wait_for(asyncio.gather(made[0].lost, made[1].lost), 5)
        await sockets.wait_closed()
        return made

    made = asyncio.run(main())
    for n in range(2):
        assert all(type(read) is bytes for read in made[n].reads)
        assert b"".join(made[n].reads) == b"".join(bytes([n * 100 + i]) * (100 + i) for i in range(20))


def test_output_a_client_does_not_read_waits_whole_pausing_the_writer_until_it_drains():
    async def main():
        sockets, port, made, _ = await listening()
        client = await connect(port, made)
        transport = made[0].transport
        transport.set_write_buffer_limits(high=64 * 1024)
        chunks = [struct.pack(">I", i) * 4096 for i in range(256)]  # 4 MiB, numbered
        for chunk in chunks:
            transport.write(chunk)
        assert made[0].events == ["made", "pause_writing"] and transport.get_write_buffer_size() > 0
        got = await read_all(client, sum(map(len, chunks)))
        await until(lambda: "resume_writing" in made[0].events)
        transport.close()  # (with nothing waiting: at once)
        assert await asyncio.wait_for(made[0].lost, 5) is None
        client.close()
        await sockets.wait_closed()
        return got, b"".join(chunks), made[0].events

    got, sent, events = asyncio.run(main())
    assert got == sent
    assert events == ["made", "pause_writing", "resume_writing", "lost"]


def test_close_sends_what_waits_first_then_ends_the_stream():
    async def main():
        sockets, port, made, _ = await listening()
        client = await connect(port, made)
        transport = made[0].transport
        transport.write(b"last words" * 100000)  # (more than the socket takes at once)
        transport.close()
        transport.write(b"never sent")  # (after close: dropped, as asyncio's)
        got = await read_all(client, 1000000)
        end = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(client, 100), 5)
        assert await asyncio.wait_for(made[0].lost, 5) is None
        client.close()
        await sockets.wait_closed()
        return got, end

    got, end = asyncio.run(main())
    assert got == b"last words" * 100000 and end == b""


def test_a_client_not_read_is_ended_when_it_hangs_up():
    """The held-back publisher whose link was cut: its socket is not read, yet its FIN ends it."""

    async def main():
        sockets, port, made, _ = await listening()
        client = await connect(port, made)
        transport = made[0].transport
        transport.pause_reading()
        await asyncio.get_running_loop().sock_sendall(client, b"unread")
        await asyncio.sleep(0.1)
        assert made[0].events == ["made"] and not made[0].received
        client.close()
        assert await asyncio.wait_for(made[0].lost, 5) is None
        await sockets.wait_closed()
        return made[0]

    protocol = asyncio.run(main())
    assert protocol.events == ["made", "eof", "lost"]


def test_a_reset_connection_is_lost_with_its_error_and_abort_drops_what_waits():
    async def main():
        sockets, port, made, _ = await listening()
        client = await connect(port, made)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # (RST)
        reset = await asyncio.wait_for(made[0].lost, 5)
        other = await connect(port, made, 2)
        made[1].transport.write(b"x" * 10000000)  # (the most of it waits)
        made[1].transport.abort()
        aborted = await asyncio.wait_for(made[1].lost, 5)
        other.close()
        await sockets.wait_closed()
        return reset, aborted, made

    reset, aborted, made = asyncio.run(main())
    assert isinstance(reset, ConnectionResetError) and made[0].events == ["made", "lost"]
    assert aborted is None and made[1].events == ["made", "pause_writing", "lost"]


def test_out_of_file_descriptors_pauses_accepting_and_takes_the_waiting_client_after():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = []

    async def main():
        sockets, port, made, logged = await listening()
        first = await connect(port, made)
        waiting = socket.socket()
        waiting.setblocking(False)
        lowest_free = os.dup(0)  # (a new descriptor is the lowest free number)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no room for another socket
        lowered.append(lowest_free)
        try:
            await asyncio.get_running_loop().sock_connect(
                waiting, ("127.0.0.1", port)
            )  # (the kernel's backlog takes it)
            await until(lambda: logged)
            assert len(made) == 1  # (the kernel holds it meanwhile)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        await until(lambda: len(made) == 2, 5)
        first.close()
        waiting.close()
        await asyncio.wait_for(made[1].lost, 5)
        await sockets.wait_closed()
        return logged

    logged = asyncio.run(main())
    assert logged == [("warning", "out of file descriptors (ulimit -n: %d): accepting again in 1 s" % lowered[0])]


def test_a_port_taken_is_an_os_error_and_leaves_nothing_listening():
    async def main():
        sockets, port, _made, _ = await listening()
        other = epoll_sockets.EpollSockets(asyncio.get_running_loop(), print)
        with pytest.raises(OSError):
            await other.listen("127.0.0.1", port, lambda: None)
        left = list(other.listening)
        await other.wait_closed()
        await sockets.wait_closed()
        return left

    assert asyncio.run(main()) == []


class Failing(Recorder):
    """A protocol with a bug: what it is sent raises."""

    def data_received(self, data):
        if data == b"boom":
            raise ValueError("a bug")
        super().data_received(data)


def test_a_protocol_that_raises_costs_its_own_connection_only():
    async def main():
        sockets, port, made, logged = await listening(Failing)
        loop = asyncio.get_running_loop()
        failing = await connect(port, made)
        other = await connect(port, made, 2)
        await loop.sock_sendall(failing, b"boom")
        lost = await asyncio.wait_for(made[0].lost, 5)
        end = await asyncio.wait_for(loop.sock_recv(failing, 10), 5)
        await loop.sock_sendall(other, b"still served")
        await until(lambda: bytes(made[1].received) == b"still served")
        client_port = failing.getsockname()[1]
        failing.close()
        other.close()
        await sockets.wait_closed()
        return lost, end, logged, client_port

    lost, end, logged, client_port = asyncio.run(main())
    assert isinstance(lost, ValueError) and end == b""
    assert [line[:2] for line in logged] == [("error", "127.0.0.1:%d: port error: ValueError('a bug')" % client_port)]


class Holder(Recorder):
    """The first read of any of them holds back every other socket (as a publisher's read that
    fills a consumer's output holds the consumer back)."""

    def data_received(self, data):
        super().data_received(data)
        if not any(p.held for p in self.others):
            for other in self.others:
                if other is not self:
                    other.transport.pause_reading()
                    other.held = True


def test_a_socket_held_back_in_the_pass_that_found_it_readable_is_read_once_resumed():
    """Two clients' octets found by one poll; the first read holds the other back. The other's
    readable event, reported before it was held, is no hang-up: it stays, and its octets are
    read once it is resumed."""

    async def main():
        sockets, port, made, _ = await listening(Holder)
        first = await connect(port, made)
        second = await connect(port, made, 2)
        for protocol in made:
            protocol.others = made
            protocol.held = False
        first.send(b"one")  # (both before the loop polls again: one pass finds them both)
        second.send(b"two")
        await until(lambda: any(p.received for p in made))
        await asyncio.sleep(0.1)
        held = [p for p in made if p.held]
        assert len(held) == 1 and held[0].events == ["made"] and not held[0].received
        held[0].transport.resume_reading()
        await until(lambda: all(p.received for p in made))
        assert sorted(bytes(p.received) for p in made) == [b"one", b"two"]
        assert [p.events for p in made] == [["made"], ["made"]]
        first.close()
        second.close()
        await asyncio.gather(*(asyncio.wait_for(p.lost, 5) for p in made))
        await sockets.wait_closed()

    asyncio.run(main())


class Passes:
    """Records the passes over the ready sockets and the reads inside them, in order."""

    def __init__(self):
        self.events = []

    def begin_pass(self):
        self.events.append("begin")

    def end_pass(self):
        self.events.append("end")


class PassReader(Recorder):
    def data_received(self, data):
        super().data_received(data)
        self.passes.events.append(bytes(data))


def test_the_reads_one_poll_finds_are_one_pass_told_before_and_after():
    """What the TCP listener writes once per pass (ports/tcp_cpython.py end_pass): the reads
    one poll found come between one begin_pass and its end_pass."""

    async def main():
        passes = Passes()
        sockets, port, made, _ = await listening(PassReader, passes)
        first = await connect(port, made)
        second = await connect(port, made, 2)
        for protocol in made:
            protocol.passes = passes
        passes.events.clear()
        first.send(b"one")  # (both before the loop polls again: one pass finds them both)
        second.send(b"two")
        await until(lambda: passes.events.count("end") >= 1 and all(p.received for p in made))
        first.close()
        second.close()
        await sockets.wait_closed()
        return passes.events

    events = asyncio.run(main())
    assert events[0] == "begin" and sorted(events[1:3]) == [b"one", b"two"] and events[3] == "end", events

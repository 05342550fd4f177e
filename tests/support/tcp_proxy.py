"""A TCP proxy on 127.0.0.1 for fault tests: it forwards between a client and a target port,
and on request cuts every link (FIN), resets it (RST), black-holes it (keeps the sockets
open and neither reads nor forwards anything, as a dead route does: no FIN, no RST, and
what the peers send piles up in their send buffers) or mutes the target's replies only
(what it was sent arrives; its answers, confirms among them, are lost).

    proxy = TcpProxy(target_port).start()   # clients connect to proxy.port
    proxy.cut() / proxy.reset() / proxy.black_hole() / proxy.down(); proxy.heal()
    proxy.byte_rate = 16000                  # each direction paced to at most this many bytes/s
    proxy.stop()

proxy.record() keeps what each link carried: proxy.recorded[n] = (what the client sent, what
the target answered), links numbered from 0 in the order they came: a real peer's bytes
(tests/fuzz's seed corpora).

down() is the target gone (a broker stopped, a route refused): every link reset, and each new
one reset as it comes, until heal().

A test may trap chosen links: proxy.on_accept = f, and each link whose f(client socket) is
true is black-holed from its first byte (f runs in the accepting thread before anything is
forwarded: the client has connected and hears nothing).
"""

import socket
import struct
import threading
import time


class TcpProxy:
    def __init__(self, target_port, host="127.0.0.1"):
        self.target = (host, target_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.links = []  # [client socket, upstream socket]
        self.lock = threading.Lock()
        self.holes = False  # black-holing: new links are dead too
        self.dead = []  # black-holed links: nothing is read from them, nothing forwarded
        self.muted = False  # only what the target sends back is swallowed
        self.stopped = False
        self.accepted = 0
        self.on_accept = None  # on_accept(client socket) true: that link is black-holed from the start
        self.refusing = False  # down(): new links are reset at once
        self.byte_rate = 0  # bytes/s each direction of a link forwards at most (0: no cap)
        self.recorded = None  # record(): {link number: (the bytes its client sent, those answered)}
        self.forwarded = 0  # bytes the clients' side sent that reached the target

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def record(self):
        self.recorded = {}
        return self

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()  # (RST: as a port nothing listens on answers)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = [client, upstream]
            trapped = self.on_accept is not None and self.on_accept(client)
            with self.lock:
                self.links.append(pair)
                number = self.accepted
                self.accepted += 1
                if self.recorded is not None:
                    self.recorded[number] = (bytearray(), bytearray())
                if self.holes or trapped:
                    self.dead.append(pair)
            threading.Thread(target=self._pump, args=(client, upstream, pair, False, number), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair, True, number), daemon=True).start()

    def _pump(self, source, sink, pair, replies, number):
        while True:
            while pair in self.dead and not self.stopped:
                time.sleep(0.01)  # nothing read, so the peer's kernel gets no room to send more
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if pair in self.dead or (replies and self.muted):
                continue  # swallowed: the peer hears nothing, not even an end
            try:
                sink.sendall(data)
            except OSError:
                break
            if self.recorded is not None:
                self.recorded[number][1 if replies else 0].extend(data)
            if not replies:
                self.forwarded += len(data)
            if self.byte_rate:
                time.sleep(len(data) / self.byte_rate)  # (the next read waits: the link's pace)
        self._close(pair)

    def _close(self, pair, rst=False):
        with self.lock:
            if pair in self.links:
                self.links.remove(pair)
            if pair in self.dead:
                self.dead.remove(pair)
        for sock in pair:
            try:
                if rst:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # close() alone does nothing while the other pump is blocked in recv() on the
                # socket: the kernel keeps it open (no FIN, no RST) until that recv returns, which
                # is when the peer next sends, a heartbeat later. shutdown wakes that recv first.
                sock.shutdown(socket.SHUT_RD if rst else socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def cut(self):
        """Close every link (the peers see FIN)."""
        for pair in list(self.links):
            self._close(pair)

    def reset(self):
        """Reset every link (the peers see RST)."""
        for pair in list(self.links):
            self._close(pair, rst=True)

    def black_hole(self):
        """Forward nothing any more, in either direction, without closing anything: the links
        open now and those opened until heal() are read no more."""
        with self.lock:
            self.holes = True
            self.dead.extend(pair for pair in self.links if pair not in self.dead)

    def fault(self, kind, chooser):
        """One fault of a kind ("cut", "reset", "black-hole"); a black hole lasts 2.5 to 3.5 s
        (chooser: a random.Random), past two heartbeat intervals of 1 s, then heals."""
        if kind == "cut":
            self.cut()
        elif kind == "reset":
            self.reset()
        else:
            self.black_hole()
            time.sleep(chooser.uniform(2.5, 3.5))
            self.heal()

    def down(self):
        """The target gone: every link reset, and each new one too until heal()."""
        self.refusing = True
        self.reset()

    def mute_replies(self):
        """Swallow only what the target sends back: it gets everything and answers, and the
        client hears nothing (its publishes arrive, their confirms never do)."""
        self.muted = True

    def heal(self, drop=True):
        """After black_hole or mute_replies: new links forward again, and the dead ones are
        dropped (as a timeout would), or with drop=False left dead for good (a route that
        died, and new links take another): the peers must give them up themselves."""
        self.holes = self.muted = self.refusing = False
        if drop:
            self.cut()

    def stop(self):
        self.stopped = True
        self.listener.close()
        self.cut()  # the dead links too: their pumps, reading again, see them closed


class TlsTerminator:
    """A TLS server on 127.0.0.1 in front of a plain TCP port (what a TLS-enabled upstream is to
    a client): an asyncio loop in a thread of its own, with certificate cert_file and key_file."""

    def __init__(self, target_port, cert_file, key_file):
        import ssl

        self.target_port = target_port
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert_file, key_file)
        self.port = None
        self.handshakes = 0
        self.ready = threading.Event()
        self.loop = None

    def start(self):
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)
        return self

    def _run(self):
        import asyncio

        async def pump(reader, writer):
            try:
                while True:
                    data = await reader.read(65536)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            writer.close()

        async def serve(reader, writer):
            self.handshakes += 1
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

        async def main():
            server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.context)
            self.port = server.sockets[0].getsockname()[1]
            self.stopping = asyncio.Event()
            self.ready.set()
            await self.stopping.wait()
            server.close()

        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(main())

    def stop(self):
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)


def self_signed(folder, name="localhost"):
    """(certificate, key) files for name and 127.0.0.1, made by the openssl command: the
    certificate is its own CA."""
    import os
    import subprocess

    cert, key = os.path.join(str(folder), "upstream.pem"), os.path.join(str(folder), "upstream.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2"]
        + ["-subj", "/CN=%s" % name, "-addext", "subjectAltName=DNS:%s,IP:127.0.0.1" % name],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key

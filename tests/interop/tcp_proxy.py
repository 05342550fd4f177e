"""A TCP proxy on 127.0.0.1 for fault tests: it forwards between a client and a target port,
and on request cuts every link (FIN), resets it (RST) or black-holes it (keeps the sockets
open and forwards nothing, as a dead route does: no FIN, no RST).

    proxy = TcpProxy(target_port).start()   # clients connect to proxy.port
    proxy.cut() / proxy.reset() / proxy.black_hole(); proxy.heal()
    proxy.stop()
"""

import socket
import struct
import threading


class TcpProxy:
    def __init__(self, target_port, host="127.0.0.1"):
        self.target = (host, target_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.links = []  # [client socket, upstream socket]
        self.lock = threading.Lock()
        self.holes = False  # black-holing: new and old links forward nothing
        self.stopped = False
        self.accepted = 0

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = [client, upstream]
            with self.lock:
                self.links.append(pair)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(client, upstream, pair), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair), daemon=True).start()

    def _pump(self, source, sink, pair):
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if self.holes:
                continue  # swallowed: the peer hears nothing, not even an end
            try:
                sink.sendall(data)
            except OSError:
                break
        self._close(pair)

    def _close(self, pair, rst=False):
        with self.lock:
            if pair in self.links:
                self.links.remove(pair)
        for sock in pair:
            try:
                if rst:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            except OSError:
                pass

    def cut(self):
        """Close every link (the peers see FIN)."""
        for pair in list(self.links):
            self._close(pair)

    def reset(self):
        """Reset every link (the peers see RST)."""
        for pair in list(self.links):
            self._close(pair, rst=True)

    def black_hole(self):
        """Forward nothing any more, in either direction, without closing anything."""
        self.holes = True

    def heal(self):
        """After black_hole: drop the dead links (as a timeout would) and forward again."""
        self.holes = False
        self.cut()

    def stop(self):
        self.stopped = True
        self.listener.close()
        self.cut()

"""A TCP server on 127.0.0.1 for a test that plays a peer of hutch's (a Modbus device, a bridge's
upstream): each connection handed to handle(socket) in a thread of its own, until stop().

    server = PeerServer(handle)     # server.port; server.accepted counts the connections
    server.stop()
"""

import socket
import threading


class PeerServer:
    def __init__(self, handle):
        self.handle = handle
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # (stopped)
            self.accepted += 1
            threading.Thread(target=self.handle, args=(sock,), daemon=True).start()

    def stop(self):
        self.listener.close()

"""A small HTTP/1.1 listener for the metrics and the status page: GET only, one request per
connection (Connection: close), on asyncio's streams, so the same code runs on CPython and on a
board (MicroPython's asyncio has streams and no more).

    listener = HttpListener(runtime, handle, bind, port)
    await listener.start()
    # handle(path, headers) -> (status, content type, body bytes, extra header lines)

It has the listener's shape the runtime stops at shutdown (close, clients, abort). A request
must arrive whole within REQUEST_MS and within MAX_REQUEST bytes, or the socket is closed: a
scraper or a browser sends a few hundred bytes at once.
"""

import asyncio

REQUEST_MS = 5000
MAX_REQUEST = 8192
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed"}


class HttpListener:
    def __init__(self, runtime, handle, bind, port):
        self.runtime = runtime
        self.handle = handle
        self.host = bind
        self.port = port
        self.server = None
        self.clients = set()  # writers of requests being answered
        self.tls = None  # (a listener's attribute the runtime reads: plain HTTP)

    async def start(self):
        self.server = await asyncio.start_server(self._client, self.host, self.port)

    async def _client(self, reader, writer):
        self.clients.add(writer)
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), REQUEST_MS / 1000)
            except (asyncio.TimeoutError, OSError, ValueError):
                request = None
            if request is None:
                response = (400, "text/plain; charset=utf-8", b"bad request\n", ())
            else:
                method, path, headers = request
                if method not in ("GET", "HEAD"):
                    response = (405, "text/plain; charset=utf-8", b"GET only\n", ("Allow: GET, HEAD",))
                else:
                    response = self.handle(path, headers)
                    if method == "HEAD":
                        response = response[:2] + (b"",) + response[3:]
            await _respond(writer, *response)
        except OSError:
            pass  # the client went away
        finally:
            self.clients.discard(writer)
            writer.close()

    def close(self):
        if self.server is not None:
            self.server.close()

    async def abort(self):
        for writer in list(self.clients):
            writer.close()
        if self.server is not None:
            await self.server.wait_closed()


async def _read_request(reader):
    """(method, path, {lower-case header name: value}) or None for what is not a request."""
    line = await reader.readline()
    size = len(line)
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    headers = {}
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_REQUEST:
            return None
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], headers


async def _respond(writer, status, content_type, body, extra=()):
    head = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "")), "Content-Type: " + content_type]
    head.append("Content-Length: %d" % len(body))
    head.append("Cache-Control: no-store")
    head.append("Connection: close")
    head.extend(extra)
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()

"""The fleet link: one AMQP 0-9-1 connection to the fleet's upstream, in a thread of its own
(hutch.client is blocking; what it does is small and seldom), which

- reads each of the member's targets' document streams from their newest document on (when it
  connects, and the next ones as they come), and hands each new one to the agent
  (server/fleet/agent.py);
- sends the newest status the agent gave it, confirmed by upstream; a status waiting while
  the link is down is replaced by a newer one, never queued behind it;
- connects again, to each of [fleet]'s URIs in turn, backing off up to MOST_BACKOFF seconds.

The agent runs on the broker's event loop: the link tells it what happened through
loop.call_soon_threadsafe, and takes its status under a lock.
"""

import threading

from ...client.protocol import AMQPError
from . import upstream

MOST_BACKOFF = 30  # seconds between rounds of the URIs, at most
WAIT_MS = 200  # how long one look for a delivery waits: how soon a status or a stop is seen
CONFIRM_MS = 10000
PREFETCH = 10  # documents a stream may deliver before they are acked


class Link:
    def __init__(self, settings, loop, agent, log):
        self.settings = settings
        self.loop = loop
        self.agent = agent  # its document(raw), link_changed(up, why), status_confirmed(seq)
        self.log = log
        self.targets = ["node:" + settings["node"]] + ["group:" + group for group in settings["groups"]]
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.status = None  # (seq, body): the newest status not yet confirmed upstream
        self.seen = {}  # target -> the bytes of its document last handed over
        self.status_declared = False
        self.thread = threading.Thread(target=self.run, name="hutch-fleet", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()

    def send_status(self, seq, body):
        with self.lock:
            self.status = (seq, body)

    def _tell(self, method, *args):
        try:
            self.loop.call_soon_threadsafe(method, *args)
        except RuntimeError:  # the loop is closed: the broker is stopping
            self.stopping.set()

    def run(self):
        try:
            self._run()
        except Exception as e:  # (a fault of hutch's own: said, not lost with the thread)
            import traceback

            self.log("error", "fleet: the link stopped: %s" % "".join(traceback.format_exception(e)).strip())

    def _run(self):
        backoff = 1
        while not self.stopping.is_set():
            for uri in self.settings["uris"]:
                try:
                    self._session(uri)
                    backoff = 1
                except (OSError, AMQPError, ValueError) as e:
                    why = "%s: %s" % (uri["uri"], _said(e))
                    self._tell(self.agent.link_changed, False, why)
                if self.stopping.is_set():
                    return
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, MOST_BACKOFF)

    def _session(self, uri):
        settings = self.settings
        client = upstream.connect(uri, "hutch fleet %s" % settings["node"], {"ca_file": settings["ca_file"]})
        try:
            for target in self.targets:  # (a stream's consumer acks, within its prefetch)
                queue = upstream.declare_documents(client, target)
                take = lambda message, target=target: self._take(client, target, message)  # noqa: E731
                client.consume(queue, take, prefetch=PREFETCH, arguments={"x-stream-offset": "last"})
            self.status_declared = False  # (at the first status: the documents come first)
            client.confirm()
            self._tell(self.agent.link_changed, True, uri["uri"])
            while not self.stopping.is_set():
                client.wait_msg(WAIT_MS)
                with self.lock:
                    status = self.status
                if status is not None:
                    self._send(client, status)
        finally:
            client.close()

    def _take(self, client, target, message):
        """A document from a target's stream: handed to the agent unless it is the one handed
        over last (the newest, read again on each connect)."""
        body = bytes(message.body)
        client.ack(message.delivery_tag)
        if self.seen.get(target) != body:
            self.seen[target] = body
            self._tell(self.agent.document, body)

    def _send(self, client, status):
        seq, body = status
        if not self.status_declared:
            upstream.declare_status(client)
            self.status_declared = True
        client.publish(
            upstream.STATUS,
            "node." + self.settings["node"],
            body,
            {"content_type": "application/json", "delivery_mode": 2},
            mandatory=False,
        )
        if not client.wait_confirms(CONFIRM_MS):
            raise OSError("its status was not confirmed within %d s" % (CONFIRM_MS // 1000))
        with self.lock:
            if self.status is status:  # (not replaced meanwhile by a newer one)
                self.status = None
        self._tell(self.agent.status_confirmed, seq)


def _said(e):
    if isinstance(e, AMQPError):
        return "%s %s" % (e.code, e.text)
    return getattr(e, "strerror", None) or str(e) or e.__class__.__name__

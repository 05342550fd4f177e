"""The source's options, as Spark hands them over (strings, names case-insensitive), checked
once and turned into one picklable Options value.

A bad option is a ValueError whose message names the option and what is wrong with it:
Spark shows it as it is (inside its own error about the data source), not as a stack trace
of ours. Names and meanings follow Spark's Kafka source where there is one.
"""

import json
from urllib.parse import unquote, urlsplit

EARLIEST = "earliest"
LATEST = "latest"
# In a JSON offsets option, as in Kafka's: -2 is the stream's earliest offset, -1 its latest.
JSON_EARLIEST = -2
JSON_LATEST = -1
# A stream's range in a batch is read by tasks of at most this many offsets each (Kafka's
# maxRecordsPerPartition; Kafka has no default): a backlog of a million records is 20 tasks,
# which the executors' cores share, each a second or two of reading, not one task alone.
MAX_RECORDS_PER_PARTITION = 50000

KNOWN = (
    "uri",
    "streams",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "prefetch",
    "timeoutMs",
    "probeTimeoutMs",
)


class Broker:
    """Where to connect: one amqp:// URI taken apart (failover is a list of these)."""

    def __init__(self, host, port, user, password, vhost):
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.vhost = vhost

    def __repr__(self):  # never the password: this ends up in error messages and logs
        return "amqp://%s@%s:%d/%s" % (self.user, self.host, self.port, self.vhost.replace("/", "%2F"))


class Options:
    """Everything the source was given, checked. Plain attributes only: it travels pickled
    to every executor inside the reader."""

    def __init__(self, raw):
        given = {}
        for key, value in raw.items():
            given[key.lower()] = value
        for key in given:
            if key not in (k.lower() for k in KNOWN):
                raise ValueError("hutch source: unknown option %r (the options are: %s)" % (key, ", ".join(KNOWN)))
        self.brokers = parse_uris(_required(given, "uri"))
        self.streams = parse_streams(_required(given, "streams"))
        self.starting = parse_offsets("startingOffsets", given.get("startingoffsets", EARLIEST), self.streams)
        self.ending = parse_offsets("endingOffsets", given.get("endingoffsets", LATEST), self.streams)
        self.max_per_trigger = _positive(given, "maxOffsetsPerTrigger", None)
        self.per_partition = _positive(given, "maxRecordsPerPartition", MAX_RECORDS_PER_PARTITION)
        self.fail_on_data_loss = _boolean(given, "failOnDataLoss", True)
        self.prefetch = _positive(given, "prefetch", 500)
        self.timeout_ms = _positive(given, "timeoutMs", 30000)
        self.probe_timeout_ms = _positive(given, "probeTimeoutMs", 1000)


def _required(given, name):
    value = given.get(name.lower())
    if value is None or not value.strip():
        raise ValueError("hutch source: the option %r is required" % name)
    return value


def _positive(given, name, default):
    value = given.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError("hutch source: %s must be a whole number above 0, not %r" % (name, value))
    return number


def _boolean(given, name, default):
    value = given.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("hutch source: %s must be true or false, not %r" % (name, value))


def parse_uris(text):
    """amqp://user:password@host:port/vhost, several separated by commas: tried in order."""
    brokers = []
    for uri in text.split(","):
        uri = uri.strip()
        parts = urlsplit(uri)
        if parts.scheme != "amqp" or not parts.hostname:
            raise ValueError("hutch source: uri %r is not amqp://user:password@host:port/vhost" % uri)
        try:
            port = parts.port or 5672
        except ValueError:
            raise ValueError("hutch source: uri %r has a bad port" % uri)
        # as pika and RabbitMQ's URI spec: the path after the first "/" is the vhost, empty: "/"
        vhost = unquote(parts.path[1:]) or "/"
        user = unquote(parts.username) if parts.username else "guest"
        password = unquote(parts.password) if parts.password else "guest"
        brokers.append(Broker(parts.hostname, port, user, password, vhost))
    return brokers


def parse_streams(text):
    streams = []
    for name in text.split(","):
        name = name.strip()
        if not name:
            raise ValueError("hutch source: streams %r has an empty name" % text)
        if name in streams:
            raise ValueError("hutch source: streams names %r twice" % name)
        streams.append(name)
    return streams


def parse_offsets(option, text, streams):
    """ "earliest", "latest", or JSON {"stream": offset} naming every stream (-2: earliest,
    -1: latest). Returns the keyword, or a dict stream -> offset or keyword."""
    text = text.strip()
    if text in (EARLIEST, LATEST):
        return text
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        raise ValueError(
            'hutch source: %s must be "earliest", "latest" or JSON such as {"%s": 0}, not %r'
            % (option, streams[0], text)
        )
    offsets = {}
    for name, offset in given.items():
        if name not in streams:
            raise ValueError("hutch source: %s names %r, which is not one of streams (%s)" % (option, name, streams))
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < JSON_EARLIEST:
            raise ValueError(
                "hutch source: %s gives %r for %r: an offset is an integer, -2 or above" % (option, offset, name)
            )
        offsets[name] = {JSON_EARLIEST: EARLIEST, JSON_LATEST: LATEST}.get(offset, offset)
    missing = [name for name in streams if name not in offsets]
    if missing:
        raise ValueError("hutch source: %s does not give an offset for %s" % (option, ", ".join(missing)))
    return offsets


def per_stream(offsets, streams):
    """A parsed offsets option as a dict stream -> offset or keyword."""
    if isinstance(offsets, dict):
        return dict(offsets)
    return dict((name, offsets) for name in streams)

"""What `hutch pipeline` checks before it starts Spark, each in well under a second: Java,
pyspark (and delta-spark for --format delta), the broker and the streams (each exists, and is
a stream queue). Spark would find each of these out too, but only after its 10 s start and as
a JVM stack trace; here each is one line that says what to do.

No pyspark here: this runs where pyspark may be missing.
"""

import importlib.util
import os
import re
import shutil
import subprocess

from hutch.client.protocol import AMQPError, ChannelClosed

from .broker import StreamError, connect, message_count
from .options import Options

JAVA_NEEDED = 17
# A broker that does not answer is said at once, not after the source's 30 s timeoutMs.
BROKER_TIMEOUT_MS = 5000


class PreflightError(Exception):
    """Something the job needs is missing or unreachable: exit 1."""


def java():
    """The java command Spark will run (JAVA_HOME's, else PATH's), checked to be 17 or later."""
    home = os.environ.get("JAVA_HOME")
    command = os.path.join(home, "bin", "java") if home else shutil.which("java")
    where = "JAVA_HOME=%s" % home if home else "PATH"
    if not command or not os.access(command, os.X_OK):
        raise PreflightError(
            "Java %d or later is needed to run Spark, and there is none on %s (install a JDK, e.g. "
            "apt install openjdk-17-jre-headless, or set JAVA_HOME)" % (JAVA_NEEDED, where)
        )
    try:
        done = subprocess.run([command, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PreflightError(
            "Java %d or later is needed to run Spark: %s -version failed: %s" % (JAVA_NEEDED, command, e)
        )
    major = java_major(done.stderr + done.stdout)
    if major is None or major < JAVA_NEEDED:
        raise PreflightError(
            "Java %d or later is needed to run Spark; %s is %s"
            % (JAVA_NEEDED, command, "Java %d" % major if major else "not a Java it can tell the version of")
        )
    return command


def java_major(version_text):
    """17 from 'openjdk version "17.0.15" ...', 8 from 'java version "1.8.0_392"'."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def pyspark():
    if importlib.util.find_spec("pyspark") is None:
        raise PreflightError("pyspark is not installed: pip install '.[spark]' in hutch's checkout (docs/install.md)")


def delta():
    if importlib.util.find_spec("delta") is None:
        raise PreflightError("--format delta needs delta-spark: pip install delta-spark (or use --format parquet)")


def streams(source_options):
    """The broker answers (the first of the uri list that does) and has every stream: a
    passive queue.declare of each, over one connection."""
    options = Options(dict(source_options, timeoutMs=str(BROKER_TIMEOUT_MS)))
    try:
        client = connect(options)
    except StreamError as e:
        raise PreflightError(str(e).replace("hutch source: ", ""))
    try:
        for stream in options.streams:
            message_count(client, stream)
    except StreamError as e:
        raise PreflightError(str(e).replace("hutch source: ", ""))
    except (OSError, AMQPError) as e:
        raise PreflightError("the broker failed while the streams were looked up: %s" % e)
    finally:
        _close(client)
    for stream in options.streams:
        refusal = not_a_stream(options, stream)
        if refusal:
            raise PreflightError(
                "queue %r is not a stream queue (x-queue-type stream), and only a stream can be read by "
                "offset: the broker refused to take it for one (%s)" % (stream, refusal)
            )


# What a stream queue may have besides x-queue-type (RabbitMQ's stream arguments). A queue
# that has one of them refuses a declare without it, naming it: that says nothing of its type.
STREAM_ARGUMENTS = (
    "x-max-length-bytes",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
)


def not_a_stream(options, stream):
    """The broker's reply text if the queue `stream` (which exists) is not a stream queue, or
    None if it is, or if that cannot be told.

    A passive queue.declare does not say a queue's type; declaring the queue again as a
    stream (durable, x-queue-type stream) does, without changing it: a stream takes the
    declare, any other queue refuses it with a 406 (or 405, an exclusive one) naming what
    differs: x-queue-type, durable, auto_delete, or an argument a stream cannot have
    (x-max-length, x-message-ttl...), all checked by hutch and RabbitMQ before x-queue-type.
    A refusal naming a stream's own argument (retention) or another code (403: no configure
    permission) cannot tell: then the source finds out when it reads (a delivery without an
    x-stream-offset)."""
    client = connect(options)
    try:
        client.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"}, record=False)
        return None
    except ChannelClosed as e:
        named = re.search(r"inequivalent arg '([^']+)'", e.text or "")
        if e.code == 405 or e.code == 406 and not (named and named.group(1) in STREAM_ARGUMENTS):
            return e.text
        return None
    except (OSError, AMQPError) as e:
        raise PreflightError("the broker failed while the streams were looked up: %s" % e)
    finally:
        _close(client)


def _close(client):
    try:
        client.close()
    except (OSError, AMQPError):
        pass  # a channel a 404 or 406 closed, a connection gone: nothing to close cleanly

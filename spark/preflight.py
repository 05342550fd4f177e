"""What `hutch pipeline` checks before it starts Spark, each in well under a second: Java,
pyspark (and delta-spark for --format delta), the broker and the streams. Spark would find
each of these out too, but only after its 10 s start and as a JVM stack trace; here each is
one line that says what to do.

No pyspark here: this runs where pyspark may be missing.
"""

import importlib.util
import os
import re
import shutil
import subprocess

from hutch.client.protocol import AMQPError

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
        raise PreflightError("pyspark is not installed: pip install 'hutch[spark]'")


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
        try:
            client.close()
        except (OSError, AMQPError):
            pass  # a channel the 404 closed, a connection gone: nothing to close cleanly

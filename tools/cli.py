"""The `hutch` command (CPython).

hutch serve [--bind ADDR] [--port N] [--config FILE] [--data DIR] [--log-level L]
hutch passwd [--password PW]     print a password hash for the config file
hutch flash --board NAME --port PORT [--config FILE] [--romfs]   install hutch on a MicroPython board
hutch bench [--start-rabbitmq | --rabbitmq HOST:PORT] [--micropython | --backlog N | --bridge N | --spark N]   benchmark hutch (and RabbitMQ, Spark)
hutch ctl status [--data DIR]    the journal, the last recovery and the quarantine
hutch pipeline --uri URI --streams A,B --output DIR --checkpoint DIR [--trigger available-now|processing=10s]
                 [--window "1 minute"] [--watermark "10 minutes"] [--schema DDL | --schema-file FILE]
                 [--starting-offsets earliest|latest|JSON] [--max-offsets-per-trigger N] [--master URL]
                                 sensor readings from streams to per-window aggregates in Parquet,
                                 with Spark (`pip install hutch[spark]`; Java 17+)
hutch plot --output DIR --png FILE [--value mean|min|max|last|count]
                                 draw those aggregates per sensor over time (`pip install hutch[plot]`)
hutch version
"""

import sys


def _tls_wanted(argv):
    """True unless this is `hutch serve` with no amqps:// link (a bridge's) in its config file:
    only then does the broker go without OpenSSL. (The other commands are not the broker: `hutch
    bench --bridge` drives pika, which imports ssl.) A glance at the file's text, before
    anything else is imported; the config is read properly later."""
    if len(argv) < 2 or argv[1] != "serve":
        return True
    for i, arg in enumerate(argv):
        path = (
            argv[i + 1] if arg == "--config" and i + 1 < len(argv) else arg[9:] if arg.startswith("--config=") else None
        )
        if path:
            try:
                with open(path, "rb") as f:
                    return b"amqps://" in f.read()
            except OSError:
                return False  # said properly when the config is read
    return False


# The broker speaks TLS only on an amqps:// bridge, yet asyncio loads OpenSSL (ssl) and so does
# hashlib (_hashlib): together 4.5 MB of resident memory, a fifth of an idle broker. Marked
# missing before anything imports them, asyncio runs without TLS support and hashlib uses its
# built-in SHA-256 (the password hashes in core/auth.py).
if not _tls_wanted(sys.argv):
    sys.modules.setdefault("ssl", None)
sys.modules.setdefault("_hashlib", None)

import argparse  # noqa: E402 (after the lines above, on purpose)
import asyncio  # noqa: E402
import gc  # noqa: E402
import getpass  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

from ..core.auth import hash_password  # noqa: E402
from ..core.broker import VERSION  # noqa: E402
from ..server import config, options, serve  # noqa: E402
from . import bench, ctl, flash  # noqa: E402


def cmd_serve(args):
    try:
        opts = options.settings(args)
    except config.ConfigError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 2
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(message)s", level=getattr(logging, opts["log_level"].upper())
    )
    _tune_gc()
    return serve.run(opts, _stop_on_signals)


# Young objects between collections of the youngest generation (CPython's default: 700).
GC_YOUNG_THRESHOLD = 20000


def _tune_gc():
    """The cyclic garbage collector cost ~12% of the broker's time under load: every message
    makes a few container objects (tuples, a Message), so the default threshold starts a
    collection every few hundred messages, and each one also walked the objects that live as
    long as the broker (modules, the spec tables). Those are moved out of the collector's way
    (gc.freeze), and collections of young objects happen less often. Messages form no
    reference cycles, so they are still freed at once by reference counting."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def _stop_on_signals(stop):
    """SIGINT and SIGTERM stop the broker cleanly: every client gets 320 first."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def cmd_passwd(args):
    password = args.password
    if password is None:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            print("hutch: the passwords differ", file=sys.stderr)
            return 1
    print(hash_password(password, os.urandom(4)))
    return 0


def cmd_version(args):
    print("hutch %s" % VERSION)
    return 0


def cmd_pipeline(argv):
    """`hutch pipeline` is hutch.spark's (hutch.spark.command parses its options): imported only
    when it runs, so no other command loads the Spark parts (nor pyspark, which they import
    once the checks are done)."""
    from hutch.spark.command import main as pipeline

    return pipeline(argv)


def cmd_plot(argv):
    """`hutch plot` is hutch.spark's too (pyarrow and matplotlib: imported only when it runs)."""
    from hutch.spark.plot import main as plot

    return plot(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:
        return cmd_pipeline(argv[1:])
    if argv[:1] == ["plot"]:
        return cmd_plot(argv[1:])
    parser = argparse.ArgumentParser(prog="hutch", description="an AMQP 0-9-1 broker for edge and IoT hardware")
    parser.add_argument("--version", action="version", version="hutch %s" % VERSION)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    p = commands.add_parser("serve", help="run the broker")
    options.add_options(p)
    p.set_defaults(run=cmd_serve)
    p = commands.add_parser("passwd", help="print a password hash for [users.NAME] password_hash")
    p.add_argument("--password", help="the password (default: ask twice)")
    p.set_defaults(run=cmd_passwd)
    p = commands.add_parser(
        "flash",
        help="install hutch on a MicroPython board (with mpremote)",
        description="build hutch's firmware bundle and install it on a MicroPython board",
    )
    flash.add_options(p)
    p.set_defaults(run=flash.run)
    p = commands.add_parser(
        "bench",
        help="benchmark hutch (and RabbitMQ) with the same load",
        description="run the same load against hutch with and without its C accelerator, "
        "and against RabbitMQ when asked; print the figures and their ratios",
    )
    bench.add_options(p)
    p.set_defaults(run=bench.run)
    p = commands.add_parser(
        "ctl",
        help="look at a data folder: journal, last recovery, quarantine",
        description="look at a broker's data folder (running or not)",
    )
    ctl.add_options(p)
    # listed for --help only: main() hands `hutch pipeline ...` to cmd_pipeline before parsing
    commands.add_parser(
        "pipeline", help="sensor readings from stream queues to per-window aggregates in Parquet (Spark)"
    )
    commands.add_parser("plot", help="draw what `hutch pipeline` wrote, per sensor over time (to a PNG)")
    p = commands.add_parser("version", help="print the version")
    p.set_defaults(run=cmd_version)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

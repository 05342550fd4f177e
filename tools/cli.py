"""The `hutch` command (CPython).

hutch serve [--bind ADDR] [--port N] [--config FILE] [--data DIR] [--log-level L]
hutch passwd [--password PW] [--config FILE --user NAME]   a password hash, printed or written into the config
hutch flash --board NAME --port PORT [--config FILE] [--romfs]   install hutch on a MicroPython board
hutch bench [--start-rabbitmq | --rabbitmq HOST:PORT] [--micropython | --backlog N | --bridge N | --spark N]   benchmark hutch (and RabbitMQ, Spark)
hutch publish --routing-key K [--exchange X] [--host H] [--port P] BODY   one message, confirmed
hutch get [--host H] [--port P] [--count N] [--ack] QUEUE    messages from a queue
hutch ctl status [--data DIR]    the journal, the last recovery and the quarantine
hutch ctl list queues|... , purge, delete, ... , import, export   ask the running broker (tools/ctl_live.py)
hutch fleet keygen | sign | push | status   a fleet of gateways: signed configuration down, status up
hutch install-service [--root DIR]   hutch as a systemd service
hutch pipeline --uri URI --streams A,B --output DIR --checkpoint DIR [--trigger available-now|processing=10s]
                 [--window "1 minute"] [--watermark "10 minutes"] [--schema DDL | --schema-file FILE]
                 [--starting-offsets earliest|latest|JSON] [--max-offsets-per-trigger N] [--master URL]
                                 sensor readings from streams to per-window aggregates in Parquet,
                                 with Spark (the spark extra; Java 17+)
hutch plot --output DIR --png FILE [--value mean|min|max|last|count]
                                 draw those aggregates per sensor over time (the plot extra)
hutch version, hutch --version

Each command's module is imported only when that command runs: `hutch serve` loads no
benchmark, board or Spark code.
"""

import os
import sys

# hashlib would load OpenSSL's _hashlib (with ssl, 4.5 MB of resident memory, a fifth of an idle
# broker) for the password hashes of core/auth.py, which its built-in SHA-256 does as well.
# Marked missing before anything imports it. Whether `ssl` itself is loaded is decided by
# `hutch serve` once its config is read (cmd_serve).
sys.modules.setdefault("_hashlib", None)

import argparse  # noqa: E402 (after the line above, on purpose)

# name: (help, description or None, the module whose add_options(parser) and run(args) it is)
COMMANDS = {
    "serve": ("run the broker", None, None),
    "passwd": (
        "print a password hash for [users.NAME] password_hash, or write it into a config file",
        "a password hash for [users.NAME] password_hash: printed, or written into --config FILE for --user NAME",
        "hutch.tools.passwd",
    ),
    "publish": (
        "publish one message (confirmed; an error if no queue takes it), for a quick test",
        "publish one message, as mosquitto_pub and rabbitmqadmin publish: confirmed and mandatory",
        "hutch.tools.publish",
    ),
    "get": (
        "print messages from a queue (put back unless --ack), for a quick test",
        "print messages from a queue, as rabbitmqadmin get: put back unless --ack",
        "hutch.tools.get",
    ),
    "flash": (
        "install hutch on a MicroPython board (with mpremote)",
        "build hutch's firmware bundle and install it on a MicroPython board",
        "hutch.tools.flash",
    ),
    "bench": (
        "benchmark hutch (and RabbitMQ) with the same load",
        "run the same load against hutch with and without its C accelerator, "
        "and against RabbitMQ when asked; print the figures and their ratios",
        "hutch.bench.command",
    ),
    "ctl": (
        "look at a data folder: journal, last recovery, quarantine",
        "look at a broker's data folder (running or not)",
        "hutch.tools.ctl",
    ),
    "fleet": (
        "a fleet of gateways: keys, signed documents pushed to them, their status",
        "the fleet's side: make a signing key, sign a configuration document, push it to the "
        "gateways of its target, and read each gateway's newest status",
        "hutch.tools.fleet",
    ),
    "install-service": (
        "install hutch as a systemd service (a hardened Type=notify unit, its own user)",
        "write a systemd unit, a sysusers.d entry and /etc/hutch/hutch.toml (under --root DIR if given)",
        "hutch.tools.install_service",
    ),
    # listed for --help only: main() hands these to hutch.spark before any parsing
    "pipeline": ("sensor readings from stream queues to per-window aggregates in Parquet (Spark)", None, None),
    "plot": ("draw what `hutch pipeline` wrote, per sensor over time (to a PNG)", None, None),
    "version": ("print the version", None, None),
}


def cmd_serve(args):
    from ..server import config, options

    try:
        opts = options.settings(args)
    except config.ConfigError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 2
    except RecursionError as e:  # (server/reload.py too_deep says why here)
        from ..server.reload import too_deep

        print("hutch: %s" % too_deep(e), file=sys.stderr)
        return 2
    opts["args"] = args  # (read again by a reload: server/reload.py)
    if not options.needs_tls(opts):
        # No TLS anywhere in this config: asyncio runs without OpenSSL (it imports ssl only to
        # offer it), which keeps 4.5 MB out of an idle broker. Decided before asyncio is imported.
        sys.modules.setdefault("ssl", None)
    import logging

    from ..server import serve

    try:
        # under systemd (JOURNAL_STREAM) the journal stamps each line: no time of our own
        journald = os.environ.get("JOURNAL_STREAM") and opts["log_file"] is None
        logging.basicConfig(
            format="%(levelname)s %(message)s" if journald else "%(asctime)s %(levelname)s %(message)s",
            level=getattr(logging, opts["log_level"].upper()),
            filename=opts["log_file"],  # (None: standard error)
        )
    except OSError as e:
        print("hutch: cannot write the log file %s: %s" % (opts["log_file"], e.strerror or e), file=sys.stderr)
        return 1
    _tune_gc()
    _fix_malloc_threshold()
    from ..ports.systemd import Notifier

    notify = Notifier.from_environment()  # (does nothing outside a systemd notify service)
    notify.send("STATUS=starting: recovering the journal")
    return serve.run(opts, lambda stop: _stop_on_signals(stop, notify))


def _fix_malloc_threshold():
    """glibc's malloc gives a block of 128 KiB and more its own mapping, returned to the system
    when freed, but raises that threshold to the size of each such block freed (up to 32 MiB):
    after a client's large frame (a buffer of megabytes, ports/tcp_cpython.py, freed once read),
    every later block below that size came from the heap, which does not shrink, and the
    broker's resident memory stepped up by a third for good (a soak's mutated MQTT sessions: 29
    to 42 MB; with the threshold fixed, 27 to 31 MB over 64,000 sessions). Fixed at its default
    (mallopt M_MMAP_THRESHOLD, which also stops the raising). Another C library than glibc has no
    mallopt: nothing to do."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (AttributeError, OSError):
        pass


M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # its default

# Young objects between collections of the youngest generation (CPython's default: 700).
GC_YOUNG_THRESHOLD = 20000


def _tune_gc():
    """The cyclic garbage collector cost ~12% of the broker's time under load: every message
    makes a few container objects (tuples, a Message), so the default threshold starts a
    collection every few hundred messages, and each one also walked the objects that live as
    long as the broker (modules, the spec tables). Those are moved out of the collector's way
    (gc.freeze), and collections of young objects happen less often. Messages form no
    reference cycles, so they are still freed at once by reference counting."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def _stop_on_signals(stop, notify):
    """SIGINT and SIGTERM stop the broker cleanly: every client gets 320 first (and systemd
    hears STOPPING=1)."""
    import asyncio
    import signal

    def stopping():
        notify.send("STOPPING=1", "STATUS=stopping: closing the connections")
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping)


class _Version(argparse.Action):
    """--version: hutch's version, as `hutch version` prints it (cmd_version); core/broker.py,
    which holds it, is loaded only then (of the commands only serve needs it: the others start
    faster without)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show hutch's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(cmd_version(namespace))


def cmd_version(args):
    from ..core.broker import VERSION

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


def _add_command(commands, name, argv):
    """The subparser of one command; its options only for the command that runs (importing its
    module), so `hutch serve` never imports `hutch bench`'s."""
    help_text, description, module_name = COMMANDS[name]
    parser = commands.add_parser(name, help=help_text, description=description or help_text)
    if argv[:1] != [name]:
        return parser
    if name == "serve":
        from ..server import options

        options.add_options(parser)
        parser.set_defaults(run=cmd_serve)
    elif name == "version":
        parser.set_defaults(run=cmd_version)
    elif module_name is not None:
        import importlib

        module = importlib.import_module(module_name)
        module.add_options(parser)
        if hasattr(module, "run"):  # (ctl's own subcommands each set theirs)
            parser.set_defaults(run=module.run)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:
        return cmd_pipeline(argv[1:])
    if argv[:1] == ["plot"]:
        return cmd_plot(argv[1:])
    parser = argparse.ArgumentParser(prog="hutch", description="an AMQP 0-9-1 and 1.0 broker for edge and IoT hardware")
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    subparsers = {name: _add_command(commands, name, argv) for name in COMMANDS}
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said in the usage of the command that was given them, not hutch's own
        subparsers[args.command].error("unrecognized arguments: %s" % " ".join(unknown))
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

"""What a gateway reads from files a person (or another program) wrote, and the HTTP requests of
its metrics port.

config: a config file's bytes through `hutch serve`'s whole reading of it (server/options.py
settings(): TOML, every section's checks, the bridges', devices', fleet's): the settings, or one
ConfigError, never another exception.

definitions: a definitions file (RabbitMQ's JSON export) through server/definitions.py: parsed,
or DefinitionsError.

pem: a PEM (or DER) file read as a board's TLS reads it (codec/pem.py der()): bytes, or the
error of a file that is not PEM (ValueError: binascii's).

http_request: the request a scraper or a browser sends the metrics port, read by ports/http.py:
(method, path, headers) or None, never another exception.
"""

import asyncio
import json
import os
import tempfile

FOLDER = tempfile.mkdtemp(prefix="hutch-fuzz-")  # (one per process: each input overwrites its file)


def _file(name, data):
    path = os.path.join(FOLDER, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def config(data):
    import argparse

    from hutch.server.config import ConfigError
    from hutch.server.options import add_options, settings

    parser = argparse.ArgumentParser()
    add_options(parser)
    path = _file("hutch.toml", data)
    args = parser.parse_args(["--config", path, "--data", os.path.join(FOLDER, "data")])
    try:
        settings(args)
    except ConfigError:
        pass


def definitions(data):
    from hutch.server.definitions import DefinitionsError, parse

    try:
        found = json.loads(data)
    except ValueError:
        return
    try:
        parse(found, salt=b"salt")
    except DefinitionsError:
        pass


def pem(data):
    """The outcome: the DER's length, or the error."""
    from hutch.codec.pem import der

    path = _file("cert.pem", data)
    try:
        return "%d octets" % len(der(path))
    except ValueError as e:
        return "ValueError %s" % type(e).__name__


def http_request(data):
    from hutch.ports.http import _read_request

    async def read():
        reader = asyncio.StreamReader(limit=8192)
        reader.feed_data(data)
        reader.feed_eof()
        try:
            return await _read_request(reader)
        except ValueError:  # (a line over the reader's limit: the listener answers 400)
            return None

    asyncio.run(read())

"""server/schema.py: each key written once, and the config file's sections, `hutch serve`'s
options, Options and the checks made from it."""

import argparse
import subprocess

import pytest
from brokers import BIN

from hutch.server import config, options, schema
from hutch.server.bridges import config as bridge_config

SERVE_HELP = subprocess.run([BIN + "/hutch", "serve", "--help"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("row", [row for row in schema.KEYS if row[schema.FLAG]], ids=lambda row: row[schema.FLAG])
def test_every_flag_of_the_schema_is_an_option_of_hutch_serve(row):
    assert row[schema.FLAG] + " " in SERVE_HELP or row[schema.FLAG] + "\n" in SERVE_HELP, SERVE_HELP
    parser = argparse.ArgumentParser()
    options.add_options(parser)
    parsed = parser.parse_args([])
    built = options.Options()
    assert getattr(parsed, schema.dest(row)) == getattr(built, schema.dest(row))  # the same defaults


def test_the_file_s_sections_are_the_schema_s():
    for section in ("server", "auth", "listener", "metrics", "wifi"):
        assert config.SECTIONS[section] == schema.keys_of(section)
    assert config.TLS_KEYS == schema.keys_of("listener.tls")
    assert all(row[schema.DESCRIPTION] for row in schema.KEYS if row[schema.SECTION] is not None)


# what a bridge needs for a key to apply
NEEDED = {
    "token_lifetime": {"uri": "amqps10://hub.example", "device_id": "gateway-7", "sas_key": "a2V5"},
    "session_expiry": {"uri": "mqtt://up", "mqtt_version": "5"},
}


def test_each_bridge_key_is_one_row_checked_by_its_kind():
    """[[bridge]]'s rows (server/bridges/config.py ROWS): each key once, described, of a kind the
    checks know; its default is what a bridge that does not set it gets; a wrong value of each
    number says what it must be, with its bounds."""
    names = [(row[schema.SECTION], row[schema.KEY]) for row in bridge_config.ROWS]
    assert len(names) == len(set(names)) and all(row[schema.DESCRIPTION] for row in bridge_config.ROWS)
    kinds = set(schema.KINDS) | {"number", "whole", "uris", "tables"}
    assert {row[schema.KIND] for row in bridge_config.ROWS} <= kinds
    bridge = bridge_config.bridges_from({"bridge": [{"name": "b", "uri": "amqp://up", "queue": "q"}]})[0]
    for row in bridge_config.ROWS:
        key, default = row[schema.KEY], row[schema.DEFAULT]
        if row[schema.SECTION] == "bridge" and default not in (None, 0) and key in bridge:
            assert bridge[key] == default, key
    checked = 0
    for row in bridge_config.ROWS:
        if row[schema.SECTION] != "bridge" or row[schema.KIND] not in ("number", "whole"):
            continue
        table = {"name": "b", "uri": "amqp://up", "queue": "q", row[schema.KEY]: -1}
        table.update(NEEDED.get(row[schema.KEY], {}))
        with pytest.raises(config.ConfigError) as refused:
            bridge_config.bridges_from({"bridge": [table]}, "hutch.toml")
        low, high = bridge_config.RANGES.get(row[schema.KEY], (0, 1 << 50))
        must = "a whole number from %d to %d" % (low, high) if row[schema.KIND] == "whole" else "a number of seconds"
        must = bridge_config.UNITS.get(row[schema.KEY], must)
        assert str(refused.value).endswith("%s must be %s, not -1" % (row[schema.KEY], must)), str(refused.value)
        checked += 1
    assert checked == 12  # 6 numbers, 6 whole numbers


def test_options_refuses_a_name_that_is_not_an_option():
    with pytest.raises(TypeError, match="'prot'"):
        options.Options(prot=5672)


# A wrong value for each checked kind of [server]: the error names the file, the section and the
# key, and says what it must be.
WRONG = {
    "port": ("x", "must be a number from 0 to 65535, not 'x'"),
    "data": ("", "must be a folder's name, not ''"),
    "log_level": ("loud", "must be debug, info, warning or error, not 'loud'"),
    "stats_interval": (-1, "must be a whole number of seconds, not -1"),
    "serial": (5, "must be a list of device names, not 5"),
    "baud": (0, "must be a positive number, not 0"),
    "journal_max_bytes": (100, "must be a number of bytes, at least 4096, not 100"),
    "segment_bytes": (True, "must be a number of bytes, at least 4096, not True"),
    "definitions": (7, "must be a file name, not 7"),
    "amqp10": ("yes", "must be true or false, not 'yes'"),
}


@pytest.mark.parametrize("key", sorted(WRONG))
def test_a_wrong_server_value_is_named_with_its_file_and_key(tmp_path, key):
    value, said = WRONG[key]
    path = tmp_path / "hutch.json"
    path.write_text('{"server": {"%s": %s}}' % (key, _json(value)))
    with pytest.raises(config.ConfigError) as raised:
        options.settings(options.Options(config=str(path)))
    assert str(raised.value) == "%s: [server] %s %s" % (path, key, said)


def test_an_option_is_named_by_its_flag():
    with pytest.raises(config.ConfigError) as raised:
        options.settings(options.Options(stats_interval=-5))
    assert str(raised.value) == "--stats-interval must be a whole number of seconds, not -5"
    with pytest.raises(config.ConfigError) as raised:
        options.settings(options.Options(metrics_port=70000))
    assert str(raised.value) == "--metrics-port must be a number from 0 to 65535, not 70000"


def _json(value):
    import json

    return json.dumps(value)

"""The journal's segment size when the config names none: the profile's, grown with a raised
disk budget (a board given megabytes of flash keeps few segments' bookkeeping in its heap), up
to the profile's largest (the esp32 profile's: its own 16 KiB, docs/boards.md says why)."""

import argparse
import json

from hutch.server import options


def _settings(tmp_path, server, board=None):
    config = tmp_path / "hutch.json"
    config.write_text(json.dumps({"server": server}))
    parser = argparse.ArgumentParser()
    options.add_options(parser)
    argv = ["--config", str(config)] + (["--board", board] if board else [])
    return options.settings(parser.parse_args(argv))


def test_a_raised_disk_budget_grows_the_segments_in_proportion(tmp_path):
    esp32 = _settings(tmp_path, {}, "esp32")
    assert (esp32["journal_max_bytes"], esp32["segment_bytes"]) == (256 * 1024, 16 * 1024)
    raised = _settings(tmp_path, {"journal_max_bytes": 10 * 1024 * 1024}, "rp2-pico-w")
    assert raised["segment_bytes"] == 640 * 1024  # 20 times the budget, 20 times the segment
    capped = _settings(tmp_path, {"journal_max_bytes": 10 * 1024 * 1024}, "esp32")
    assert capped["segment_bytes"] == 16 * 1024  # the esp32 profile's largest
    huge = _settings(tmp_path, {"journal_max_bytes": 64 * 1024 * 1024 * 1024})
    assert huge["segment_bytes"] == 8 * 1024 * 1024  # never past Linux's own size
    named = _settings(tmp_path, {"journal_max_bytes": 10 * 1024 * 1024, "segment_bytes": 32768}, "esp32")
    assert named["segment_bytes"] == 32768  # a size the config names stays

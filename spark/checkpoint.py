"""The options a `hutch pipeline` checkpoint was made with, kept beside Spark's own files
(CHECKPOINT/hutch-pipeline.json) and checked when the checkpoint is used again.

Spark's checkpoint holds a query's offsets and its open windows, not what they mean. Run
again with other streams, the source goes on without a word (a stream added starts at its
first record, one left out is no longer read); with another window, watermark, schema or
output, the state and the files of the first run are mixed with the new ones. So a run
whose options differ from those the checkpoint was made with is refused in one line,
before Spark starts, unless Spark never committed anything to it (then the options are
simply replaced). The broker (--uri) is not compared: addresses, passwords and failover
lists change while the streams stay the same.

No pyspark here: this runs before Spark starts.
"""

import json
import os

FILE = "hutch-pipeline.json"
# option (as the command spells it): what a run with another value would get wrong
COMPARED = ("--streams", "--output", "--window", "--watermark", "--schema", "--fields", "--format", "--dedup")
# what a checkpoint written before an option existed was made with (its query had no such step)
BEFORE = {"--dedup": "none", "--fields": ""}
# The query's form, kept beside its options: windows per gateway with correction rows
# (spark/windows.py). A checkpoint without it holds an earlier query's state (one Spark
# watermark for every reading, late readings dropped, no gateway column), which this query
# cannot read, and its output has other columns.
QUERY = "per-gateway windows, corrections"


class CheckpointMismatch(Exception):
    """The checkpoint was made with other options: exit 2."""


def options_of(job):
    """The options of a job that a checkpoint is tied to, as text (streams in name order)."""
    return {
        "--streams": ",".join(sorted(job.streams)),
        "--output": job.output,
        "--window": job.window,
        "--watermark": job.watermark,
        "--schema": job.schema,
        "--fields": job.fields_text,
        "--format": job.format,
        "--dedup": job.dedup,
        "query": QUERY,
    }


def check(job):
    """CheckpointMismatch naming every option that differs from the checkpoint's, if the
    checkpoint has a committed batch and was made with other options."""
    made_with = _read(job.checkpoint)
    if made_with is None or not _committed(job.checkpoint):
        return
    if made_with.get("query") != QUERY:
        raise CheckpointMismatch(
            "--checkpoint %s was made by an earlier hutch pipeline, whose query kept one watermark for every "
            "gateway and wrote no gateway column: this one cannot take its state on. Give a new --checkpoint "
            "and --output (docs: pipeline, Many gateways, one dataset)" % job.checkpoint
        )
    now = options_of(job)
    for name, value in BEFORE.items():
        made_with.setdefault(name, value)
    differ = [name for name in COMPARED if name in made_with and made_with[name] != now[name]]
    if differ:
        raise CheckpointMismatch(
            "--checkpoint %s was made with %s; this run gives %s. A checkpoint holds one query's offsets "
            "and windows: run with its options, or give a new --checkpoint (and --output)"
            % (
                job.checkpoint,
                ", ".join("%s %s" % (name, made_with[name]) for name in differ),
                ", ".join("%s %s" % (name, now[name]) for name in differ),
            )
        )


def remember(job):
    """Write the job's options beside the checkpoint (check() has passed)."""
    path = os.path.join(job.checkpoint, FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(options_of(job), f, indent=1)
    os.replace(path + ".tmp", path)


def _read(checkpoint):
    try:
        with open(os.path.join(checkpoint, FILE)) as f:
            made_with = json.load(f)
    except (OSError, ValueError):
        return None
    return made_with if isinstance(made_with, dict) else None


def _committed(checkpoint):
    """Whether Spark committed a batch to the checkpoint (a file in its commits/ folder)."""
    try:
        return any(not name.startswith(".") for name in os.listdir(os.path.join(checkpoint, "commits")))
    except OSError:
        return False

"""What `hutch pipeline` wrote, as a reader must take it: the part files the Parquet sink's commit
log lists (`DIR/_spark_metadata`), not a glob (a crashed batch may have left files in no
commit, and its replay writes the same rows again into new ones). `hutch plot` reads them; the
command counts each batch's rows by kind from the files the batch added.

No Spark: the log is JSON lines, the files are read with pyarrow (pyspark[sql] brings it).
"""

import json
import os


class NotAnOutput(Exception):
    """The folder has no commit log: not the output of hutch pipeline (yet)."""


def committed_files(output):
    """The part files the sink's commit log lists, added and not deleted since (the log's
    compacted files, N.compact, hold every entry before them: reading them all is the same)."""
    log = os.path.join(output, "_spark_metadata")
    try:
        names = sorted(name for name in os.listdir(log) if not name.startswith("."))
    except OSError as e:
        raise NotAnOutput("%s is not the output of hutch pipeline (no _spark_metadata: %s)" % (output, e.strerror))
    added, deleted = set(), set()
    for name in names:
        with open(os.path.join(log, name)) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:  # the first is the log's version, "v1"
            entry = json.loads(line)
            path = entry["path"].replace("file://", "", 1)
            (added if entry["action"] == "add" else deleted).add(path)
    return sorted(added - deleted)


def batch_rows(output, batch_id):
    """{kind: rows} of the part files batch batch_id committed to a Parquet output (its own
    entries of the sink's log: a compacted log file, every tenth, lists all before it too), or
    None if they cannot be read (Delta's output, a batch not in the log)."""
    log = os.path.join(output, "_spark_metadata")
    try:
        import pyarrow.parquet as pq

        mine = _entries(log, batch_id)
        if mine is None:
            return None
        if os.path.exists(os.path.join(log, "%d.compact" % batch_id)):
            for earlier in range(batch_id):
                mine -= _entries(log, earlier) or set()
        counts = {}
        for path in sorted(mine):
            for kind in pq.read_table(path, columns=["kind"]).column("kind").to_pylist():
                counts[kind] = counts.get(kind, 0) + 1
        return counts
    except (ImportError, OSError, ValueError, KeyError):
        return None


def _entries(log, batch_id):
    """The paths batch batch_id's log file adds (N, or N.compact), or None without one."""
    for name in (str(batch_id), "%d.compact" % batch_id):
        try:
            with open(os.path.join(log, name)) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue
        out = set()
        for line in lines[1:]:
            entry = json.loads(line)
            if entry["action"] == "add":
                out.add(entry["path"].replace("file://", "", 1))
        return out
    return None

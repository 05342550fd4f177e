"""`hutch bench --spark N` as a user runs it: a small N, the printed table and the JSON.

In the group of the run's Spark jobs (conftest.py), not in the benchmarks' group of
test_bench.py (it starts no RabbitMQ): it runs beside that group rather than after it."""

import json
import subprocess

import pytest
from bench_runs import HUTCH, bench, number
from pipeline_support import assert_group_ends

SPARK_ROWS = [
    "publish N readings into the stream (4 publishers, confirms)",
    "hutch source -> noop sink, local[*]",
    "hutch source -> hutch pipeline's windows -> Parquet",
    "batch latency, 1,000 readings per batch, median",
    "batch latency, 1,000 readings per batch, p95",
    "Spark's rate source (rate-micro-batch) -> noop sink",
    "hutch source / rate source",
]


@pytest.mark.xdist_group("spark")  # conftest.py: the Spark jobs of a run, one after another
@pytest.mark.timeout(600)
def test_spark_prints_every_row_with_a_figure_and_leaves_no_spark_behind(tmp_path):
    out = tmp_path / "spark.json"
    proc = subprocess.Popen(
        [HUTCH, "bench", "--spark", "2000", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stdout, stderr = proc.communicate(timeout=540)
    assert proc.returncode == 0, stderr
    printed = {}
    for line in stdout.splitlines():
        for name in SPARK_ROWS:
            if line.startswith(name + "  "):
                printed[name] = number(line.split()[-1])
    assert sorted(printed) == sorted(SPARK_ROWS), stdout
    assert all(value > 0 for value in printed.values()), stdout
    assert "load average at the start: " in stdout
    # the JVM's chatter went to the run's log, not the terminal: stderr has only the steps
    assert all(
        line.startswith(("hutch on ", "starting Spark", "1/4 ", "2/4 ", "3/4 ", "4/4 ")) for line in stderr.splitlines()
    ), stderr
    figures = json.loads(out.read_text())["figures"]
    assert figures["source"] == printed["hutch source -> noop sink, local[*]"]
    # Spark's JVM was stopped with the command, and its Python workers end with it
    assert_group_ends(proc.pid, "hutch bench --spark")


def test_spark_and_another_mode_is_refused():
    done = bench("--spark", "1000", "--backlog", "1000", timeout=60)
    assert (
        done.returncode == 2
        and done.stderr
        == "hutch bench: --backlog, --bridge, --cluster, --spark, --board, --mqtt, --dedup and --modbus: pick one\n"
    )

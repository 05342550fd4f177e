"""docs/spark.md's snippets run as written against a fresh `hutch serve`, as
tests/docs/test_snippets.py runs every other page's.

The page's Spark code runs in this process, in the run's Spark session (the `spark` fixture:
`SparkSession.builder.getOrCreate()` in the snippet returns it), since a Spark of its own
would cost a JVM's start. Two things are changed: the port (5672, as every page writes it,
becomes the test broker's), and the folders the query writes, which the page names relative
to where the user runs it, are put in the test's folder (Spark resolves a relative path
against its JVM's working folder, which this process's tests share).
"""

import contextlib
import io
import os
import subprocess
import sys

import pytest
from brokers import hutch_serve
from snippets import snippets, with_port

pytestmark = [pytest.mark.xdist_group("spark-session"), pytest.mark.timeout(300)]
PAGE = "docs/spark.md"


def test_the_spark_page_s_snippets_run_as_written(spark, tmp_path):
    blocks = snippets(PAGE)
    assert [language for language, _, why in blocks if not why] == ["python", "python"]
    broker = hutch_serve(tmp_path).start()
    try:
        streams, query = (with_port(code, broker.port) for _, code, _ in blocks)
        done = subprocess.run([sys.executable, "-c", streams], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        query = query.replace('"readings-', '"%s/readings-' % tmp_path)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(query, PAGE, "exec"), {"__name__": "__main__"})
    finally:
        broker.stop()
    assert printed.getvalue().splitlines() == [
        "[Row(stream='alarms', device='greenhouse-1', value='21.5'), "
        "Row(stream='readings', device='greenhouse-1', value='21.5')]",
        "1",
    ]
    assert os.path.isdir(tmp_path / "readings-checkpoint")
    assert not broker.errors(), broker.log()

"""Every code snippet of README.md and the documentation runs as written against a fresh broker.

Each page's ```python and ```js blocks are taken in order and run, each as a script of its
own (the test run's Python, which has pika, Qpid Proton, paho-mqtt and hutch; Node with
tests/node's packages for rhea), against one `hutch serve` started for the page with no config
and an empty data folder, as `make serve` starts it (with `--mqtt-port` and `--mqtt-ws-port`
for a page whose snippets use MQTT's ports; with the page's [[device]] table, its device a
scripted one, for a page that commands a Modbus device). An ```html block is a page that uses MQTT.js's
browser bundle: saved beside the bundle and opened in headless Chromium, what it prints is its
list items (tests/support/mqtt_pages.py: an image the page gets holds its DOM until its client
has connected). One thing is changed: the ports, 5672 (and 1883, 8083) as the pages write
them, become the test broker's (tests run in parallel). What each snippet prints is compared
with what the page says it prints.

A block that needs what this broker has not (hardware, users) says so in a comment before it
(`<!-- not run: needs ... -->`): it is compiled, and its `hutch` imports are made, so that a
name the page uses exists; a ```json block with an `mqtt-broker` node, a Node-RED flow, reads
as JSON (tests/interop/mqtt/test_node_red.py runs docs/mqtt.md's against a broker with the
page's users). The Spark page's blocks need a Spark session:
tests/interop/spark/test_spark_snippets.py runs them.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from brokers import hutch_serve
from mqtt_pages import page_beside_bundle, page_dom
from paths import NODE_DIR, ROOT
from snippets import PAGES, devices_config, page_name, snippets, with_port

from hutch.bench.brokers import free_port

RUN_ELSEWHERE = {
    "docs/spark.md": "tests/interop/spark/test_spark_snippets.py",
    # the snippets that read a pipeline's merged figures, run on the fleet's output
    "docs/pipeline.md": "tests/interop/spark/test_fleet_to_parquet.py",
}
NODE = shutil.which("node")

# What each snippet that is run prints, by page and its place among the page's snippets
# (a snippet that prints nothing: ""). A change to a page's snippets changes this table.
PRINTS = {
    ("README.md", 0): "b'21.5'\n",
    ("README.md", 1): "True\n",
    ("docs/amqp10.md", 0): "",
    ("docs/amqp10.md", 1): "b'21.5' 0\n",
    ("docs/amqp10.md", 2): "",
    ("docs/amqp10.md", 3): "b'{\"t\": 21.5}' {'sensor': 's-7'}\n",
    ("docs/sensor-client.md", 0): "on disk: True\n" * 3,
    ("docs/exactly-once.md", 0): "True\ngreenhouse-3 boot 1 reading 1\n",
    ("docs/exactly-once.md", 1): "[19.0, 0]\n",
    ("docs/streams.md", 0): "offset 0: b'21.5'\n",
    ("docs/mqtt.md", 0): "[('sensors/greenhouse-3/temp', b'21.5')]\n",
    ("docs/mqtt.md", 1): "sensors.greenhouse-4.temp b'19.0' {'x-mqtt-publish-qos': 1, 'x-mqtt-dup': False}\n",
    ("docs/mqtt.md", 2): "sensors/greenhouse-5/temp b'20.5'\n",
    ("docs/mqtt.md", 3): "",
    ("docs/mqtt.md", 4): "sensors/greenhouse-1/rh = 40\nsensors/greenhouse-1/temp = 21.5\n",
    ("docs/mqtt.md", 6): "[(b'hello from bob', [42])]\n",
    ("docs/modbus.md", 0): "setpoint-1 {'device': 'boiler', 'register': 'setpoint', 'value': 42.5, 'result': 'ok'}\n",
}


def pages_to_run():
    return [page_name(p) for p in PAGES if snippets(p) and page_name(p) not in RUN_ELSEWHERE]


def run(language, code, broker, folder, mqtt_port=None, ws_port=None):
    """Run one snippet (its ports made the test broker's); its CompletedProcess."""
    code = with_port(code, broker.port, mqtt_port, ws_port)
    if language == "html":
        page = page_beside_bundle(code, folder)
        items = re.findall(r"<li>([^<]*)</li>", page_dom(page, broker.log))
        return subprocess.CompletedProcess(page, 0, "".join(item + "\n" for item in sorted(items)), "")
    if language == "js":
        script = os.path.join(folder, "snippet.js")
        command = [NODE, script]
        env = dict(os.environ, NODE_PATH=os.path.join(NODE_DIR, "node_modules"))
    else:
        script = os.path.join(folder, "snippet.py")
        command = [sys.executable, script]
        env = None
    with open(script, "w") as f:
        f.write(code)
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=60)


def check_without_running(language, code, where):
    """A block that needs what this test has not (hardware, a broker with users): a Node-RED flow
    reads as JSON; code compiles, and the hutch names it imports exist."""
    if language == "node-red":
        json.loads(code)
        return
    compile(code, where, "exec")
    imports = [line for line in code.splitlines() if re.match(r"(from hutch[.\w]* import|import hutch)", line)]
    for line in imports:
        exec(line, {})


def with_device(page, tmp_path):
    """For a page whose snippets command a Modbus device (docs/modbus.md): (the broker, made
    with the page's [[device]] table, its address made a scripted device's here; that device,
    examples/modbus_device.py); else (the broker, None)."""
    config = devices_config(page)
    if config is None:
        return hutch_serve(tmp_path), None
    port = free_port()
    config = re.sub(r'uri = "modbus\+tcp://[^"]*"', 'uri = "modbus+tcp://127.0.0.1:%d"' % port, config)
    device = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "examples", "modbus_device.py"), "tcp", str(port), "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert device.stdout.readline().strip() == "ready"
    return hutch_serve(tmp_path, config), device


@pytest.mark.parametrize("page", pages_to_run())
def test_the_snippets_of_a_page_run_as_written_against_a_fresh_broker(page, tmp_path):
    broker, device = with_device(page, tmp_path)
    mqtt_port = None
    if any("1883" in code for _, code, _ in snippets(page)):  # a page of MQTT clients: MQTT served too
        mqtt_port = free_port()
        broker.base_command += ["--mqtt-port", str(mqtt_port)]
        broker.command += ["--mqtt-port", str(mqtt_port)]
    ws_port = None
    if any("8083" in code for _, code, _ in snippets(page)):  # MQTT over WebSocket too
        ws_port = free_port()
        broker.base_command += ["--mqtt-ws-port", str(ws_port)]
        broker.command += ["--mqtt-ws-port", str(ws_port)]
    broker.start()
    try:
        for i, (language, code, why) in enumerate(snippets(page)):
            where = "%s, snippet %d" % (page, i)
            if why:
                check_without_running(language, code, where)
                continue
            done = run(language, code, broker, str(tmp_path), mqtt_port, ws_port)
            assert done.returncode == 0, "%s failed:\n%s\n%s%s" % (where, code, done.stdout, done.stderr)
            assert (page, i) in PRINTS, "%s printed %r: add it to PRINTS" % (where, done.stdout)
            assert done.stdout == PRINTS[page, i], where
    finally:
        try:
            broker.stop()
        finally:
            if device is not None:  # (stopped by its PID, whatever the broker did)
                device.kill()
                device.wait()
                device.stdout.close()
    assert not broker.errors(), broker.log()


def test_every_snippet_is_run_or_says_why_not():
    """Each page with snippets is run here or by the test RUN_ELSEWHERE names, and every
    snippet that PRINTS knows of is still there."""
    for page, test in RUN_ELSEWHERE.items():
        assert snippets(page), page
        assert os.path.exists(os.path.join(ROOT, test)), test
    counted = {(page_name(p), i) for p in PAGES for i, (_, _, why) in enumerate(snippets(p)) if not why}
    assert set(PRINTS) <= counted, set(PRINTS) - counted
    not_run = [(page_name(p), why) for p in PAGES for _, _, why in snippets(p) if why]
    assert all(why.startswith("needs ") for _, why in not_run), not_run

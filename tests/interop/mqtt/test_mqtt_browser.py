"""A browser's dashboard over MQTT over WebSocket: headless Chromium opens docs/mqtt.md's page (a
local file) that loads MQTT.js's browser bundle from the npm package, connects to hutch's
--mqtt-ws-port, subscribes to `sensors/#` and lists what it is given; the readings are published by
mosquitto_pub through hutch's MQTT listener on TCP (retained, so the page gets them when it
subscribes). The test reads the readings back from the page's DOM and keeps its screenshot."""

import os
import re
import subprocess

from brokers import free_port, wait_until
from mqtt_brokers import start_hutch, stop
from mqtt_pages import page_beside_bundle, page_dom, screenshot
from snippets import snippets, with_port


def docs_page(ws_port, folder):
    """docs/mqtt.md's dashboard page (its html snippet) in folder, beside MQTT.js's bundle, on
    this broker's WebSocket port."""
    (html,) = [code for language, code, _ in snippets("docs/mqtt.md") if language == "html"]
    return page_beside_bundle(with_port(html, None, ws_port=ws_port), folder)


READINGS = {"sensors/greenhouse-1/temp": "21.5", "sensors/greenhouse-1/rh": "40", "sensors/greenhouse-2/temp": "19.0"}


def test_a_browser_dashboard_shows_the_readings_sensors_publish(tmp_path):
    ws_port = free_port()
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port)))
    try:
        wait_until(lambda: "MQTT over WebSocket on 127.0.0.1:%d" % ws_port in broker.running.log(), 30)
        for topic, value in READINGS.items():
            subprocess.run(
                ["mosquitto_pub", "-p", str(broker.port), "-u", "guest", "-P", "guest", "-q", "1", "-r",
                 "-t", topic, "-m", value],
                check=True, timeout=30,
            )  # fmt: skip
        page = docs_page(ws_port, tmp_path)
        dom = page_dom(page, broker.running.log)
        shown = dict(re.findall(r"<li>([^<]+) = ([^<]+)</li>", dom))
        assert shown == READINGS, dom[-2000:]
        png = screenshot.screenshot(page.as_uri(), str(tmp_path / "dashboard.png"))
        assert os.path.getsize(png) > 1000
    finally:
        stop(broker)

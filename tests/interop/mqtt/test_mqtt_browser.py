"""A browser's dashboard over MQTT over WebSocket: headless Chromium opens a page (a local file)
that loads MQTT.js's browser bundle from the npm package, connects to hutch's --mqtt-ws-port,
subscribes to `sensors/#` and lists what it is given; the readings are published by
mosquitto_pub through hutch's MQTT listener on TCP (retained, so the page gets them when it
subscribes). The test reads the readings back from the page's DOM and keeps its screenshot."""

import http.server
import os
import re
import subprocess
import sys
import threading
import time

from brokers import free_port, wait_until
from mqtt_brokers import start_hutch, stop
from paths import NODE_DIR, ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import screenshot  # noqa: E402 (docs/: headless Chromium, as the docs' test runs it)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>greenhouse</title>
<script src="file://%(bundle)s"></script></head>
<body><h1>greenhouse</h1><ul id="readings"></ul><img src="http://127.0.0.1:%(hold)d/hold" alt="">
<script>
const client = mqtt.connect("ws://127.0.0.1:%(port)d/mqtt", {username: "guest", password: "guest"});
client.on("connect", () => client.subscribe("sensors/#", {qos: 1}));
client.on("message", (topic, payload) => {
  const item = document.createElement("li");
  item.textContent = topic + " = " + payload.toString();
  document.getElementById("readings").appendChild(item);
});
</script></body></html>
"""


def hold_server(log):
    """An HTTP server whose one image the page loads, answered only once the page's MQTT client
    has connected (the broker's log says so) and a second has passed: Chromium's virtual time
    (--virtual-time-budget) waits for a pending image, not for WebSocket frames, so the page
    gets its readings before its DOM is taken, however loaded the machine."""

    class Hold(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            wait_until(lambda: "client id 'mqttjs_" in log(), 30)
            time.sleep(1.0)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hold)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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
        page = tmp_path / "dashboard.html"
        bundle = os.path.join(NODE_DIR, "node_modules", "mqtt", "dist", "mqtt.min.js")
        hold = hold_server(broker.running.log)
        page.write_text(PAGE % {"bundle": bundle, "port": ws_port, "hold": hold.server_address[1]})
        dom = screenshot.dump_dom(page.as_uri())
        shown = dict(re.findall(r"<li>([^<]+) = ([^<]+)</li>", dom))
        assert shown == READINGS, dom[-2000:]
        png = screenshot.screenshot(page.as_uri(), str(tmp_path / "dashboard.png"))
        assert os.path.getsize(png) > 1000
        hold.shutdown()
    finally:
        stop(broker)

"""A dashboard's MQTT over WebSocket, run for real: a page with MQTT.js's browser bundle in
headless Chromium (test_mqtt_browser.py, and the docs' snippets: tests/docs/test_snippets.py),
and a Node-RED flow started from its flows file (test_node_red.py)."""

import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

from brokers import free_port, wait_until
from paths import NODE_DIR, ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import screenshot  # noqa: E402 (docs/: headless Chromium, as the docs' test runs it)

BUNDLE = os.path.join(NODE_DIR, "node_modules", "mqtt", "dist", "mqtt.min.js")  # MQTT.js for browsers
NODE_RED = os.path.join(NODE_DIR, "node_modules", "node-red", "red.js")


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


def page_beside_bundle(html, folder):
    """A page (its text) written to folder as dashboard.html, beside MQTT.js's bundle as
    mqtt.min.js, where docs/mqtt.md's page loads it from: the page's path."""
    shutil.copy(BUNDLE, os.path.join(str(folder), "mqtt.min.js"))
    page = pathlib.Path(str(folder)) / "dashboard.html"
    page.write_text(html)
    return page


def page_dom(page, log):
    """The DOM of a page (a file, whose MQTT.js connects to the broker whose log this is) once its
    client has had its readings: the page gets the hold image (hold_server) before its end."""
    hold = hold_server(log)
    try:
        html = page.read_text()
        image = '<img src="http://127.0.0.1:%d/hold" alt="">' % hold.server_address[1]
        page.write_text(html.replace("</body>", image + "</body>", 1))
        return screenshot.dump_dom(page.as_uri())
    finally:
        hold.shutdown()
        page.write_text(html)


class NodeRed:
    """Node-RED started headless on a flows file as docs/mqtt.md starts it: `node-red --userDir .
    flows.json` in the flows file's folder (its credentials file, flows_cred.json, beside it; a
    file node's relative name lands there too), with an admin port of its own."""

    def __init__(self, flows_file):
        folder = os.path.dirname(str(flows_file))
        self.log_path = os.path.join(folder, "node-red.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["node", NODE_RED, "--userDir", ".", "--port", str(free_port()), os.path.basename(str(flows_file))],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )

    def said(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()

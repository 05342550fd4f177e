"""The code snippets of README.md and the documentation's pages, for the tests that run them
(tests/docs/test_snippets.py, tests/interop/spark/test_spark_snippets.py)."""

import glob
import os
import re

from paths import ROOT

PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# A ```python, ```js or ```html block (a page in a browser), or a ```json one (a Node-RED flow
# if it has an `mqtt-broker` node, else data a page shows), after a comment that says why it is
# not run, if it is not
BLOCK = re.compile(r"(?:<!-- not run: ([^>]*?) -->\n)?```(python|js|html|json)\n(.*?)```", re.S)
NODE_RED_FLOW = '"type": "mqtt-broker"'
# A file of examples/ written into a page (docs/_ext/generated.py): run by
# tests/interop/clients/test_examples.py as the file it is, so not here
GENERATED = re.compile(r"<!-- generated: .*?<!-- end of generated text -->", re.S)


def snippets(page):
    """[(language, code, why it is not run or "")] of a page (a path from the checkout), in order;
    language: python, js, html or node-red."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    found = []
    for why, language, code in BLOCK.findall(GENERATED.sub("", text)):
        if language == "json":
            if NODE_RED_FLOW not in code:
                continue  # (data, not something to run)
            language = "node-red"
        found.append((language, code, why))
    return found


def page_name(path):
    return os.path.relpath(path, ROOT)


def with_port(code, port, mqtt_port=None, ws_port=None):
    """A snippet against a test broker: the ports the pages write, 5672 (and MQTT's 1883, MQTT
    over WebSocket's 8083), made the broker's."""
    if port is not None:
        code = code.replace("5672", str(port))
    if mqtt_port is not None:
        code = code.replace("1883", str(mqtt_port))
    if ws_port is not None:
        code = code.replace("8083", str(ws_port))
    return code


TOML_BLOCK = re.compile(r"```toml\n(.*?)```", re.S)


def devices_config(page):
    """The page's ```toml block with a [[device]] whose registers are writable (the device its
    command snippet talks to), or None."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = GENERATED.sub("", f.read())
    found = [code for code in TOML_BLOCK.findall(text) if "[[device]]" in code and "writable = true" in code]
    return found[0] if found else None

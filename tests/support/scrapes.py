"""Reading a broker's metrics port as Prometheus does (a GET, the text format's series, and
Debian's `promtool check metrics` on a scrape) and as a person does (the status page, as headless
Chromium leaves it)."""

import base64
import re
import subprocess
import urllib.error
import urllib.request

PROMTOOL = "/usr/bin/promtool"
CHROMIUM = "/usr/bin/chromium"


def get(url, auth=None):
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(("%s:%s" % auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.headers.get("Content-Type"), response.read().decode()


def get_once_listening(url, timeout=10):
    """get(url), tried again while nothing listens yet (a broker opens its metrics port a moment
    after its AMQP one, which is what RunningBroker waits for)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            return get(url)
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def series(text):
    """{(name, labels text): value} of a scrape."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r"^([a-zA-Z_:][\w:]*)(\{.*\})? (\S+)$", line)
            assert m, line
            found[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return found


def promtool(text):
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def dom_figures(url, profile):
    """The status page as headless Chromium leaves it after its script ran: {data-figure: text}.
    profile: a folder for Chromium's profile (the test's own, removed with it)."""
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--user-data-dir=" + profile,
            "--virtual-time-budget=4000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = dict(re.findall(r'data-figure="([^"]*)">([^<]*)<', done.stdout))
    assert "updated" in figures, done.stdout[-3000:]
    return figures

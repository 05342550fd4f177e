"""A page of the built docs site as headless Chromium shows it: `make screenshot` runs

    python docs/screenshot.py docs/assets/home.png [PAGE]

which builds the site (Sphinx, warnings are errors) into a temporary folder, serves it on
127.0.0.1, and has Debian's chromium take a 1280x900 screenshot of PAGE (default: the home
page, index.html). tests/docs/test_docs.py uses the same functions.
"""

import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# No network beyond the page on 127.0.0.1, no profile left behind, no first-run work.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def build(dest):
    """Build the site into dest with sphinx-build -W (a warning fails the build); its output."""
    sphinx = os.path.join(os.path.dirname(sys.executable), "sphinx-build")
    proc = subprocess.run(
        [sphinx, "-W", "--keep-going", "-q", "-b", "html", HERE, dest], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError("the docs build failed:\n" + proc.stdout + proc.stderr)
    return proc.stdout + proc.stderr


@contextlib.contextmanager
def served(folder):
    """The folder over HTTP on 127.0.0.1 (a free port) while the block runs; yields the base URL."""
    handler = functools.partial(QuietHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d/" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    requested = []

    def log_message(self, format, *args):
        QuietHandler.requested.append(self.path)


def chromium(url, *extra, timeout=120):
    """Run headless Chromium on url with a fresh profile; its CompletedProcess."""
    with tempfile.TemporaryDirectory(prefix="hutch-chromium-") as profile:
        argv = [CHROMIUM, *FLAGS, "--user-data-dir=" + profile, *extra, url]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def screenshot(url, png, width=1280, height=900):
    proc = chromium(url, "--screenshot=" + os.path.abspath(png), "--window-size=%d,%d" % (width, height))
    if not os.path.exists(png):
        raise RuntimeError("chromium wrote no screenshot (exit %s):\n%s" % (proc.returncode, proc.stderr[-3000:]))
    return png


def dump_dom(url):
    """The page's DOM once its scripts ran, as Chromium serialises it."""
    proc = chromium(url, "--dump-dom", "--virtual-time-budget=5000")
    if proc.returncode != 0:
        raise RuntimeError("chromium --dump-dom failed (exit %s):\n%s" % (proc.returncode, proc.stderr[-3000:]))
    return proc.stdout


def main(argv):
    png = argv[0] if argv else os.path.join(HERE, "assets", "home.png")
    page = argv[1] if len(argv) > 1 else "index.html"
    with tempfile.TemporaryDirectory(prefix="hutch-site-") as site:
        build(site)
        with served(site) as base:
            screenshot(base + page, png)
    print("screenshot of %s: %s" % (page, png))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

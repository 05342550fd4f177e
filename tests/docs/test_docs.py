"""The documentation: the site builds with warnings as errors, its home page renders in headless
Chromium, the configuration reference covers every key of the config schema, every config
file the pages show is one hutch accepts, and the pages speak to users.

The site is built once for the module (Sphinx, `-W`: a broken link between pages, a missing
section or include fails it), served on 127.0.0.1 and opened by Debian's chromium, as
`make screenshot` does (docs/screenshot.py).
"""

import glob
import os
import re
import struct
import subprocess
import sys

import pytest
from paths import ROOT

DOCS = os.path.join(ROOT, "docs")
sys.path.insert(0, DOCS)
sys.path.insert(0, os.path.join(DOCS, "_ext"))

import config_reference  # noqa: E402 (docs/_ext)
import generated  # noqa: E402 (docs/_ext)
import screenshot  # noqa: E402 (docs/)

from hutch.server import config, options  # noqa: E402

PAGES = sorted(glob.glob(os.path.join(DOCS, "*.md")))
USER_TEXTS = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "boards", "README.md")] + [
    p for p in PAGES if os.path.basename(p) not in ("design.md", "changelog.md")
]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("site"))
    screenshot.build(folder)
    return folder


def test_the_site_builds_with_warnings_as_errors_and_has_every_page(site):
    for page in PAGES:
        name = os.path.splitext(os.path.basename(page))[0]
        assert os.path.exists(os.path.join(site, name + ".html")), name
    assert os.path.exists(os.path.join(site, "_images", "path.svg"))
    # the examples are included from examples/, not copied: the page holds the file's text
    clients = read(os.path.join(site, "clients.html"))
    assert "amq.rabbitmq.reply-to" in clients and "confirm_delivery" in clients


def test_the_site_fetches_nothing_from_elsewhere(site):
    """No script, style sheet, font or image from another host: the pages work offline."""
    for path in glob.glob(os.path.join(site, "*.html")):
        html = read(path)
        outside = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="((?:https?:)?//[^"]+)"', html)
        assert not outside, (os.path.basename(path), outside)


def test_the_configuration_reference_lists_every_key_with_its_default(site):
    html = read(os.path.join(site, "configuration.html"))
    for key in config_reference.schema_keys():
        name = key.split("?")[-1].split(".")[-1]
        assert '<code class="docutils literal notranslate"><span class="pre">%s</span></code>' % name in html, key
    for text in ("handshake_timeout_ms", "auth_failure_delay_ms", "close_timeout_ms", "16777216", "esp32s3-psram"):
        assert text in html


def test_a_config_key_without_a_description_fails_the_reference(monkeypatch):
    config_reference.check()  # as the code is: every key described, no stale description
    monkeypatch.setitem(config.SECTIONS, "telemetry", ("port", "path"))
    with pytest.raises(config_reference.ConfigReferenceError, match="telemetry.port, telemetry.path"):
        config_reference.check()
    monkeypatch.setitem(config.SECTIONS, "telemetry", None)
    with pytest.raises(config_reference.ConfigReferenceError, match=r"\[telemetry\] has no fixed keys"):
        config_reference.check()
    monkeypatch.delitem(config.SECTIONS, "telemetry")
    monkeypatch.setitem(config_reference.DESCRIPTIONS, "server.prot", "a key that is not there")
    with pytest.raises(config_reference.ConfigReferenceError, match="server.prot"):
        config_reference.check()


def test_a_new_config_section_appears_in_the_reference(monkeypatch):
    """A section added to the schema, with its keys described, is in the page once it is made
    anew, and the page is stale until then."""
    monkeypatch.setitem(config.SECTIONS, "telemetry", ("port",))
    monkeypatch.setitem(config_reference.DESCRIPTIONS, "telemetry.port", "The port of the telemetry endpoint.")
    page, held = generated.regenerate(read(os.path.join(DOCS, "configuration.md")))
    assert {"config-reference " + name for name in config_reference.TABLES} == set(held)
    assert "## `[telemetry]`\n\n| key | default | what it does |" in page
    assert "| `port` | none | The port of the telemetry endpoint. |" in page
    assert generated.stale_pages() == ["docs/configuration.md"]


def test_the_text_the_pages_hold_from_the_code_is_current():
    """The configuration tables and the examples written into the pages are what the code and
    examples/ make now: `python docs/_ext/generated.py` writes them."""
    assert generated.stale_pages() == [], "run: " + generated.MEND


def test_every_page_reads_whole_as_plain_markdown():
    """No Sphinx directive that a Markdown reader (a code host, an editor) shows as it is, no
    placeholder for a table, and every example a page names is in it."""
    for path in USER_TEXTS + [os.path.join(DOCS, "design.md"), os.path.join(DOCS, "changelog.md")]:
        text = read(path)
        where = os.path.relpath(path, ROOT)
        assert "```{" not in text and ":::{" not in text, where
        assert "<!-- config-reference" not in text, where
        for region in re.findall(r"<!-- generated: [^>]*-->\n(.*?)<!-- end of generated text -->", text, re.S):
            assert region.strip(), where
    clients = read(os.path.join(DOCS, "clients.md"))
    assert "amq.rabbitmq.reply-to" in clients and "confirm_delivery" in clients


# Where a text sends its reader to a section: `docs/PAGE.md, "Section"`, or a link PAGE.md#anchor
SECTION_REFERENCE = re.compile(r"docs/([a-z0-9-]+)\.md,?\s+[\"“]([^\"”]+)[\"”]")
ANCHOR_LINK = re.compile(r"\]\(([a-z0-9-]+)\.md#([a-z0-9-]+)\)")


def headings(page):
    """A page's headings (not the comments of its code blocks)."""
    found, fenced = [], False
    for line in read(os.path.join(DOCS, page + ".md")).splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("#") and not fenced:
            found.append(line.strip("#").strip())
    return found


def anchor(heading):
    """The anchor myst gives a heading (myst_heading_anchors): GitHub's slug."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.lower()))


def test_every_see_x_lands_on_a_page_that_has_x():
    """Every reference to a page's section, in the docs, the examples, the code's comments and
    messages, names a section the page has."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = [p for p in tracked.splitlines() if p.endswith((".md", ".py", ".toml", ".txt", ".js")) and "/" != p[:1]]
    checked = 0
    for relative in texts:
        if relative.startswith("tests/"):
            continue
        text = read(os.path.join(ROOT, relative))
        for page, section in SECTION_REFERENCE.findall(text):
            section = " ".join(section.replace("#", " ").split())  # (a comment's text across lines)
            assert os.path.exists(os.path.join(DOCS, page + ".md")), (relative, page)
            assert any(section.lower() in h.lower() for h in headings(page)), (relative, page, section)
            checked += 1
        if relative.startswith("docs/") or relative == "README.md":
            for page, target in ANCHOR_LINK.findall(text):
                assert target in [anchor(h) for h in headings(page)], (relative, page, target)
                checked += 1
    assert checked >= 10


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_the_home_page_in_headless_chromium(site, tmp_path):
    with screenshot.served(site) as base:
        dom = screenshot.dump_dom(base + "index.html")
        png = screenshot.screenshot(base + "index.html", str(tmp_path / "home.png"))
    # Furo's page, its scripts run: the navigation, the search box, the picture of the path
    assert "sidebar-search" in dom and 'href="getting-started.html"' in dom and "path.svg" in dom
    assert "Where to go" in dom and "Compatibility with RabbitMQ" in dom
    assert png_size(png) == (1280, 900)
    # a blank page compresses to a few KiB; this one has text, a picture and a sidebar
    assert os.path.getsize(png) > 40000
    committed = os.path.join(DOCS, "assets", "home.png")
    assert png_size(committed) == (1280, 900)


def test_no_page_tells_users_to_pip_install_hutch_from_an_index():
    """hutch is on no package index: `pip install hutch` (or 'hutch[spark]') installs nothing of
    it. A requirement with a location (`'hutch[spark] @ git+...'`) is fine."""
    texts = USER_TEXTS + [os.path.join(ROOT, name) for name in ("CONTRIBUTING.md", "pyproject.toml", "Makefile")]
    examples = glob.glob(os.path.join(ROOT, "examples", "*"))
    texts += [path for path in examples if os.path.isfile(path)]  # (not a __pycache__)
    texts.append(os.path.join(ROOT, "firmware", "README.md"))
    wrong = re.compile(r"pip install ['\"]?hutch(\[[^\]]*\])?['\"]?(?!\s*@)(\s|`|$)")
    for path in texts:
        for n, line in enumerate(read(path).splitlines(), 1):
            assert not wrong.search(line), "%s:%d: %s" % (os.path.relpath(path, ROOT), n, line)


def test_the_readme_is_a_door():
    text = read(os.path.join(ROOT, "README.md"))
    assert len(text.splitlines()) <= 250
    for command in ("make serve", "make test"):
        assert "    %s " % command in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), target


def toml_blocks(path):
    return re.findall(r"```toml\n(.*?)```", read(path), re.S)


def test_every_config_the_docs_show_is_one_hutch_serve_accepts(tmp_path, monkeypatch):
    configs = [(path, block) for path in USER_TEXTS for block in toml_blocks(path)]
    configs += [(path, read(path)) for path in glob.glob(os.path.join(ROOT, "examples", "*.toml"))]
    assert len(configs) >= 6
    # a config that names a definitions file finds it where the page has it: its ```json block
    # of definitions, beside the config (docs/modbus.md's try-modbus.json)
    monkeypatch.chdir(tmp_path)
    for path, text in configs:
        named = re.search(r'definitions = "([^"/]+)"', text)
        if named:
            (found,) = [b for b in re.findall(r"```json\n(.*?)```", read(path), re.S) if '"queues"' in b]
            (tmp_path / named.group(1)).write_text(found)
    for i, (path, text) in enumerate(configs):
        config_file = tmp_path / ("config-%d.toml" % i)
        config_file.write_text(text)
        try:
            options.settings(options.Options(config=str(config_file)))
        except config.ConfigError as e:
            raise AssertionError("%s: %s\n%s" % (os.path.relpath(path, ROOT), e, text))


HISTORY = re.compile(
    r"\b(issue \d+|as the issue|earlier runs?|earlier versions?|the first version|as before|"
    r"no longer|used to|was changed|nowadays)\b",
    re.I,
)


def test_the_pages_speak_in_the_present_to_users():
    """History is CHANGELOG.md's, design reasoning docs/design.md's."""
    for path in USER_TEXTS:
        for n, line in enumerate(read(path).splitlines(), 1):
            found = HISTORY.search(line)
            assert not found, "%s:%d: %r in %s" % (os.path.relpath(path, ROOT), n, found.group(0), line)


def test_the_pages_agree_on_what_hutch_serves():
    """AMQP 1.0 is served (docs/amqp10.md): no page lists it among what hutch does not serve."""
    compatibility = read(os.path.join(DOCS, "compatibility.md"))
    assert "[AMQP 1.0](amqp10.md)" in compatibility
    for path in USER_TEXTS:
        for line in read(path).splitlines():
            if "AMQP 1.0" in line and re.search(r"\bnot (served|supported)\b|\bno: ", line):
                raise AssertionError("%s: %s" % (os.path.relpath(path, ROOT), line))

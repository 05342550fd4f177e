"""Text in the pages that is made from the code: written into the Markdown files themselves, so
a page reads whole wherever it is read (a code host, a checkout, the built site).

A region starts with a line naming what it holds and ends with END:

    <!-- generated: config-reference limits -->     the table "limits" of config_reference.py
    <!-- generated: example examples/gateway.toml -->           a file of the checkout, whole
    <!-- generated: example examples/pika_confirms.py from-line 12 -->     from its line 12 on
    <!-- generated: example examples/sensor_simulator.py function main -->  one function of it

`python docs/_ext/generated.py` writes every region of docs/*.md anew; `--check` only says
which pages are stale (exit 1). The site's build checks the same (a stale page is a warning,
which `sphinx-build -W` makes an error), and so does tests/docs/test_docs.py: a config key or
an example changed without its pages fails both, naming the command that mends them.
"""

import ast
import glob
import os
import sys

import config_reference

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DOCS)
BEGIN = "<!-- generated: "
END = "<!-- end of generated text -->"
LANGUAGES = {".py": "python", ".toml": "toml", ".js": "javascript", ".json": "json"}


class GeneratedError(Exception):
    pass


def example(path, *how):
    """A file of the checkout as a fenced block: whole, `from-line N` on, or `function NAME`."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    if how[:1] == ("from-line",):
        lines = lines[int(how[1]) - 1 :]
    elif how[:1] == ("function",):
        found = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == how[1]]
        if not found:
            raise GeneratedError("%s has no function %s" % (path, how[1]))
        lines = lines[found[0].lineno - 1 : found[0].end_lineno]
    elif how:
        raise GeneratedError("example %s: %r is neither from-line N nor function NAME" % (path, " ".join(how)))
    language = LANGUAGES.get(os.path.splitext(path)[1], "text")
    return ["```" + language] + lines + ["```"]


def config_table(name):
    if name not in config_reference.TABLES:
        raise GeneratedError("unknown config table %r (known: %s)" % (name, ", ".join(config_reference.TABLES)))
    config_reference.check()
    return config_reference.TABLES[name]()


MAKERS = {"config-reference": config_table, "example": example}


def regenerate(text, where="page"):
    """The page with every region's text made anew: (text, [what each region holds])."""
    out, held = [], []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not (line.startswith(BEGIN) and line.rstrip().endswith("-->")):
            continue
        words = line[len(BEGIN) :].rstrip()[:-3].split()
        if not words or words[0] not in MAKERS:
            raise GeneratedError("%s: %r is none of: %s" % (where, line, ", ".join(MAKERS)))
        held.append(" ".join(words))
        end = i
        while end < len(lines) and lines[end] != END:
            if lines[end].startswith(BEGIN):
                break
            end += 1
        if end == len(lines) or lines[end] != END:
            raise GeneratedError("%s: %r has no %s after it" % (where, line, END))
        # blank lines around it: a table's rows go on until one (GitHub's Markdown reads the
        # END line after a table as one more row)
        out.extend([""] + MAKERS[words[0]](*words[1:]) + ["", END])
        i = end + 1
    return "\n".join(out) + "\n", held


def pages():
    return sorted(glob.glob(os.path.join(DOCS, "*.md")))


def stale_pages():
    """The pages (paths from the checkout) whose generated text is not what the code makes now."""
    stale = []
    for path in pages():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if regenerate(text, path)[0] != text:
            stale.append(os.path.relpath(path, ROOT))
    return stale


def write():
    """Every page's regions made anew; the pages changed."""
    changed = []
    for path in pages():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = regenerate(text, path)[0]
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            changed.append(os.path.relpath(path, ROOT))
    return changed


MEND = "python docs/_ext/generated.py"


def _source_read(app, docname, source):
    """The site's check: a page whose generated text is stale is a warning (an error with -W)."""
    text, _ = regenerate(source[0], docname + ".md")
    if text != source[0]:
        from sphinx.util import logging

        logging.getLogger(__name__).warning("%s.md: its generated text is stale: run `%s`" % (docname, MEND))


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        stale = stale_pages()
        for page in stale:
            print("%s: its generated text is stale: run `%s`" % (page, MEND))
        sys.exit(1 if stale else 0)
    for page in write():
        print("wrote %s" % page)

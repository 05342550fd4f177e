"""What only the built site adds to the pages: its navigation, and the changelog's text.

Every page of docs/ reads whole as plain Markdown, on a code host as in a checkout: it holds
no directive a Markdown reader would show as it is. Sphinx's own structure comes in here,
as each page is read for the site: the navigation (toctree directives, NAVIGATION below)
after the home page's text, and CHANGELOG.md (at the top of the checkout) as the changelog
page. A page left out of NAVIGATION is a warning of Sphinx's, which `-W` makes an error.
"""

NAVIGATION = (
    (
        "Using hutch",
        (
            "getting-started",
            "gateway",
            "install",
            "configuration",
            "clients",
            "sensor-client",
            "exactly-once",
            "boards",
            "serial",
            "durability",
            "backlogs",
            "streams",
            "bridges",
            "cluster",
            "fleet",
            "spark",
            "pipeline",
            "operations",
            "monitoring",
            "security",
            "amqp10",
            "mqtt",
            "modbus",
            "compatibility",
            "performance",
            "troubleshooting",
        ),
    ),
    ("Project", ("design", "changelog")),
)


def toctrees():
    blocks = []
    for caption, pages in NAVIGATION:
        blocks.append("```{toctree}\n:hidden:\n:caption: %s\n\n%s\n```\n" % (caption, "\n".join(pages)))
    return "\n" + "\n".join(blocks)


def _source_read(app, docname, source):
    if docname == "index":
        source[0] += toctrees()
    elif docname == "changelog":
        source[0] = "```{include} ../CHANGELOG.md\n```\n"


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx's settings for hutch's documentation site: `make docs` builds it into site/.

The pages are Markdown (myst-parser), the theme Furo. Each page reads whole as plain Markdown:
the text made from the code (the configuration reference's tables, the examples) is written
into the pages by _ext/generated.py, which the build checks is current, and only the site's
navigation and the changelog's text come in at build time (_ext/site_pages.py). Nothing is
fetched when a page is viewed: no web fonts, no scripts from elsewhere.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

from hutch.core.broker import VERSION  # noqa: E402 (after the path above)

project = "hutch"
author = "the hutch developers"
copyright = "the hutch developers, MIT licence"
release = version = VERSION

extensions = ["myst_parser", "generated", "site_pages"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_static"]
# every heading down to ### gets an anchor, so pages link to a section: [x](streams.md#retention)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
# a link to a page or a section that does not exist is a warning (myst.xref_missing), and
# `sphinx-build -W` (make docs, tests/docs/test_docs.py) makes it an error

html_theme = "furo"
html_title = "hutch %s" % VERSION
html_static_path = ["_static"]
html_css_files = ["hutch.css"]
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {"navigation_with_keys": True}
pygments_style = "friendly"
pygments_dark_style = "monokai"

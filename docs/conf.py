"""The documentation site: Sphinx with the Furo theme, pages in Markdown (MyST).

``make docs`` builds it strictly (every warning an error, every reference checked), as
``.ci/run`` does; ``_ext/cronchain_reference.py`` writes the reference pages' tables from the code
and fails the build when a job field, setting, command, exit status, metric, endpoint,
HTTP status, state or Python name lacks its entry.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

from cronchain.scheduler.version import VERSION  # noqa: E402

project = "cronchain"
author = "cronchain's developers"
copyright = "2026, cronchain's developers"
release = version = VERSION

extensions = ["myst_parser", "sphinx.ext.autodoc", "cronchain_reference"]
# The Python reference shows each signature's types; those of other libraries are not
# documented here, so a reference to them is not a broken link.
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
nitpick_ignore_regex = [
    ("py:class", r"(sqlalchemy|celery|datetime|pathlib|typing|collections|argparse)\..*"),
    ("py:class", r"cronchain\.scheduler\.(engine\.Engine|declare\..*)"),
    ("py:class", r"(Engine|Celery|Path|datetime|timedelta|Any|Callable|Iterable|Mapping|P|R)"),
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "screenshots/*.md"]
# Links to a page's headings are checked like links to pages: `[x](time.md#dst)`.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
nitpicky = True

html_theme = "furo"
html_title = f"cronchain {VERSION}"
html_static_path: list[str] = []
html_show_sourcelink = False

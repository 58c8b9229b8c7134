"""Sphinx configuration of the course website. site/build.py runs sphinx-build once per
edition with ``-c site`` and describes the edition in the ``CHUNKPREFILL_SITE`` environment
variable (JSON): its language, the other editions, the commit, the vendored files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
if "CHUNKPREFILL_SITE" not in os.environ:
    raise SystemExit("build the site with `make site` (site/build.py), not sphinx-build alone")
EDITION = json.loads(os.environ["CHUNKPREFILL_SITE"])
VENDOR = Path(EDITION["vendor"])
sys.path[:0] = [str(SITE / "ext"), str(SITE / "live")]  # the extension, the live page

project = "chunkprefill"
author = "the chunkprefill authors"
copyright = "the chunkprefill authors, Apache-2.0"  # noqa: A001 - Sphinx's name
language = EDITION["language"]
html_title = EDITION["words"]["title"]

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    # the source behind every API entry: on the repository's web pages at this commit when
    # its address is known (site/build.py --repo-url), else as pages of the site itself
    "sphinx.ext.linkcode" if EDITION["repo_url"] else "sphinx.ext.viewcode",
    "chunkprefill_site",
]
exclude_patterns = ["_generated", "**/.ipynb_checkpoints"]
templates_path = [str(SITE / "templates")]

# The notebooks as stored: their outputs are the page; nothing is executed.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "html_image"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # notebooks may start below h1 in a section

# Local copies of what Sphinx and myst-nb would fetch from CDNs (site/vendor.toml).
html_static_path = [str(SITE / "static"), str(VENDOR / "static")]
html_extra_path = [str(VENDOR / "extra")]
mathjax_path = "vendor/mathjax/tex-mml-chtml.js"
nb_ipywidgets_js = {
    "vendor/require.js": {},
    "vendor/embed-amd.js": {"data-jupyter-widgets-cdn": "vendor/"},
}
html_css_files = ["vendor/noto-sans-tc/400.css", "site.css"]

html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,  # the .ipynb each page was built from
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}
html_sidebars = {"**": ["navbar-logo.html", "language-switch.html", "search-button-field.html",
                        "sbt-sidebar-nav.html"]}
html_favicon = str(SITE / "static" / "favicon.svg")
html_copy_source = True
html_sourcelink_suffix = ""  # _sources/ holds the .ipynb itself, downloadable as it is
chunkprefill_edition = EDITION

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Each object on the page of the module that defines it, once: a package's re-exports
# (its __all__) are not documented again on the package's page.
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}


def linkcode_resolve(domain: str, info: dict) -> str | None:
    """An API entry's lines at this commit on the repository's web pages (--repo-url)."""
    import importlib
    import inspect

    if domain != "py" or not info.get("module"):
        return None
    obj = importlib.import_module(info["module"])
    for part in info["fullname"].split("."):
        obj = getattr(obj, part, None)
    try:
        path = Path(inspect.getsourcefile(obj)).resolve().relative_to(SITE.parent)
        lines, start = inspect.getsourcelines(obj)
    except (TypeError, OSError, ValueError):
        return None
    return (f"{EDITION['repo_url']}/blob/{EDITION['commit']}/{path.as_posix()}"
            f"#L{start}-L{start + len(lines) - 1}")

"""site/build.py's own rules, without building: what it finds by walking the checkout, how
it rewrites relative links for the staged tree, and how it reads a notebook's stated time.
(The build itself is checked in a browser by tests/browser/test_site.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("site_build", ROOT / "site" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


def test_modules_are_found_by_walking_the_package():
    names = build.module_names()
    assert {"chunkprefill", "chunkprefill.scheduler", "chunkprefill.trace"} <= set(names)
    assert not [n for n in names if "__" in n or n.split(".")[-1].startswith("_")]
    on_disk = {p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
               for p in (ROOT / "chunkprefill").rglob("*.py")
               if not any(part.startswith("_") for part in p.relative_to(ROOT).parts)}
    assert on_disk <= set(names)  # every public module file has a page


def test_public_names_are_the_packages_all():
    import chunkprefill

    assert build.public_names() == list(chunkprefill.__all__)


def _links() -> build.Links:
    staged = {Path("site/en/live_trace.md"): "live_trace.md",
              Path("notebooks/02_x.ipynb"): "notebooks/02_x.ipynb"}
    return build.Links(staged, repo_url="", commit="abc")


def test_links_are_rewritten_to_where_the_files_land():
    links = _links()
    text = ("[live](../site/en/live_trace.md), [code](../chunkprefill/trace.py#L3), "
            "[web](https://example.org/a.md), [here](#top), [test](../tests/test_cli.py), "
            "![fig](fig.png)")
    out = links.rewrite(text, Path("notebooks"), "notebooks")
    assert "[live](../live_trace.md)" in out
    assert "[code](../api/chunkprefill.trace.md#L3)" in out
    assert "[web](https://example.org/a.md)" in out and "[here](#top)" in out
    assert "[here](#top), test, " in out and "[test]" not in out
    assert links.dropped == ["../tests/test_cli.py"]  # no page for it: words kept, link gone
    assert "![fig](fig.png)" in out  # images are left alone
    # a page already written with its path in the site is kept as it is
    assert links.rewrite("[02](notebooks/02_x.ipynb)", Path("site/en"), "") == \
        "[02](notebooks/02_x.ipynb)"


def test_links_to_other_files_point_at_the_repository_when_it_is_known():
    links = build.Links({}, repo_url="https://example.org/r", commit="abc")
    assert links.rewrite("[t](../tests/test_cli.py)", Path("notebooks"), "notebooks") == \
        "[t](https://example.org/r/blob/abc/tests/test_cli.py)"


def _nb(opening: str) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": [opening]}]}


def test_a_notebooks_time_is_its_own_words_or_nothing():
    assert build.notebook_time(_nb("What you will do. About 45 minutes.")) == "45 minutes"
    assert build.notebook_time(_nb("Takes 30–45 min on a laptop")) == "30–45 min"
    assert build.notebook_time(_nb("n = `min(owed, budget)`, step 4. min")) == "not stated yet"
    assert build.notebook_time(_nb("- **所需時間**：大約 45 分鐘，含練習。")) == "45 分鐘"


def test_a_link_to_another_editions_notebook_goes_to_that_editions_page():
    """A translation's link to its English original (or to a notebook not translated yet)
    leaves this edition's tree: raw HTML, up to the site's root, to the other page."""
    links = build.Links({}, repo_url="", commit="abc",
                        elsewhere={Path("notebooks/00_x.ipynb"): "notebooks/00_x.html"},
                        root="../")
    out = links.rewrite("[English](../00_x.ipynb#top)", Path("notebooks/zh-TW"), "notebooks")
    assert out == '<a href="../../notebooks/00_x.html#top">English</a>'
    assert links.dropped == []


def test_every_edition_has_every_word_the_first_one_has():
    import pytest

    eds = {"en": {"words": {"a": "x", "b": "y"}}, "zh-TW": {"words": {"a": "甲"}}}
    with pytest.raises(SystemExit, match=r"\[zh-TW.words\] lacks b"):
        build.edition_words(eds)
    import tomllib

    build.edition_words(tomllib.loads((ROOT / "site" / "editions.toml").read_text()))


def test_a_link_to_an_html_anchor_goes_out_as_html(tmp_path):
    """03 links 04's ``<a id="async-scheduling">`` (one id in both editions, whatever the
    heading's translation); Sphinx resolves only headings, so the build writes the link as
    HTML to the built page, where the browser finds the id."""
    site_build = build

    target = site_build.ROOT / "notebooks" / "04_vllms_other_knobs.ipynb"
    assert site_build._explicit_anchor(target, "async-scheduling")
    assert not site_build._explicit_anchor(target, "no-such-anchor")
    links = site_build.Links({Path("notebooks/04_vllms_other_knobs.ipynb"):
                              "notebooks/04_vllms_other_knobs.ipynb"}, "", "c")
    out = links.rewrite("see [async](04_vllms_other_knobs.ipynb#async-scheduling)",
                        Path("notebooks"), "notebooks")
    assert out == 'see <a href="04_vllms_other_knobs.html#async-scheduling">async</a>'

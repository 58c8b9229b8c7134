"""The real zh-TW edition: every catalog and every generated notebook that exists (a glob, so
the edition can grow notebook by notebook) passes every check of dev/i18n."""

from __future__ import annotations

import nbformat
import pytest
from i18n_fixtures import ROOT

from dev.i18n import checks, report
from dev.i18n.catalog import Layout

LAYOUT = Layout(ROOT)
EDITION = sorted(LAYOUT.edition.glob("*.ipynb"))
CATALOGS = sorted(LAYOUT.catalogs.glob("*.po"))


def test_the_edition_has_a_notebook_and_every_catalog_its_notebook():
    assert EDITION, "notebooks/zh-TW/ holds no notebook"
    assert [p.name for p in EDITION] == [nb.name for nb in LAYOUT.edition_notebooks()]


def test_complete():
    assert checks.complete(LAYOUT) == []


def test_fresh_catalogs():
    assert checks.fresh_catalogs(LAYOUT) == []


@pytest.mark.parametrize("po", [*CATALOGS, LAYOUT.runtime_po], ids=lambda p: p.name)
def test_faithful_taiwan_usage_and_typography(po):
    assert report.catalog_text_problems(LAYOUT, po, runtime=po == LAYOUT.runtime_po) == []


@pytest.mark.parametrize("edition", EDITION, ids=lambda p: p.name)
def test_fresh_same_experiment_same_numbers_figures(edition):
    assert report.notebook_problems(LAYOUT, edition) == []


@pytest.mark.parametrize("edition", EDITION, ids=lambda p: p.name)
def test_rendered_prose_typography(edition):
    """Every markdown segment of the generated notebook as a reader sees it (the article's
    quotes and any English fallback included): one line each, the article's typography."""
    from dev.i18n.catalog import Article
    from dev.i18n.segments import segments
    article = Article.load(LAYOUT)
    found = []
    for cell in nbformat.read(edition, 4).cells:
        if cell.cell_type == "markdown":
            for seg in segments(cell.source, article.quotes):
                if not seg.verbatim:  # the article's own lines keep the article's typography
                    found += checks.typography(seg.text)
    assert found == []


def test_readme_zh_tw():
    readme = ROOT / "README.zh-TW.md"
    assert readme.exists()
    assert report.markdown_text_problems(LAYOUT, readme) == []


# sha256 of i18n/article.txt when it was copied from the article (shared/seed/
# 000_39e7c5c3d3116743.txt, sha256 7fc5ac51..., its lines up to "Reference", stripped): the copy
# the quote checks read must stay the article, wherever the article itself is not at hand.
ARTICLE_COPY_SHA256 = "d5707652641d0dd631760f6070307375310b84d45c92e2cdee9896c9303e79df"


def test_article_copy_is_the_article():
    """i18n/article.txt is the article's text (its reference list aside), line for line: its
    hash is the one recorded when it was copied, and where the article itself sits beside
    this checkout (the team's machines), the two are compared line for line too."""
    import hashlib
    assert hashlib.sha256(LAYOUT.quotes.read_bytes()).hexdigest() == ARTICLE_COPY_SHA256
    for seed in sorted((ROOT.parent / "shared" / "seed").glob("*.txt"))[:1]:
        lines = [line.strip() for line in seed.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        assert LAYOUT.quotes.read_text(encoding="utf-8").splitlines() == \
            lines[:lines.index("Reference")]

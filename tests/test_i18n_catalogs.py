"""The zh-TW machinery on a synthetic repository: extraction, msgmerge's fuzzy marking, the
Complete and Fresh gates (an English change fails until translated), rendering."""

from __future__ import annotations

import json

import nbformat
import polib
import pytest
from i18n_fixtures import (
    PROSE,
    ROOT,
    RUNTIME,
    edit_english,
    english_notebook,
    make_repo,
    translate,
)

from dev.i18n import checks
from dev.i18n.catalog import (
    Article,
    ExtractError,
    Layout,
    prose_template,
    runtime_template,
    tr_calls,
    update_all,
)
from dev.i18n.notebook import SETUP_TAG, relink, render_notebook
from dev.i18n.segments import OMIT, render, segments


@pytest.fixture
def repo(tmp_path):
    layout = make_repo(tmp_path)
    update_all(layout)
    return layout


def _translated(repo):
    translate(repo.catalog_for(english_notebook(repo)), PROSE)
    translate(repo.runtime_po, RUNTIME)
    update_all(repo)  # compiles the runtime JSON, normalises the files
    return repo


def test_segments_kinds_unwrapping_and_what_is_left_alone(repo):
    msgids = {e.msgid: e.comment for e in
              prose_template(repo, english_notebook(repo), Article.load(repo))}
    assert msgids == {
        "Demo · the budget": "heading",
        "A long prompt arrives while decodes stream. The article: 「假設每個 step 的 token "
        "budget 是 16。」": "paragraph",
        "*A long prefill step takes long; decode requests cannot advance.*": "paragraph",
        "Table": "heading", "what": "table header", "where": "table header",
        "a `tiny` trace of 16 tokens": "table cell",
        "first item with [a link](https://example.org/a)": "list item",
        "second item continued": "list item", "Worked answer": "summary",
        "The answer is 42.": "paragraph"}
    # not extracted: the article blockquote (verbatim), the code fence, `x_y`, 00 and #


def test_cjk_soft_break_joins_without_a_space():
    segs = segments("中文的第一行\n第二行，然後 English\ncontinues", lambda t: False)
    assert segs[0].text == "中文的第一行第二行，然後 English continues"


def test_prose_inside_html_is_an_error_not_a_silent_skip():
    with pytest.raises(ValueError, match="prose inside an HTML block"):
        segments("<details><summary>Hint</summary>\nUntranslated words here\n</details>",
                 lambda t: False)


def test_render_puts_each_translation_in_its_place():
    src = ("## Title\n\n| name | role |\n|---|---|\n| one | `c` |\n\n- item\n  two\n\n"
           "<details><summary>Answer</summary>\n\nGloss to drop.\n\n</details>")
    segs = segments(src, lambda t: False)
    zh = {"Title": "標題", "name": "名稱", "role": "角色", "one": "一", "item two": "項目二",
          "Answer": "答案", "Gloss to drop.": OMIT}
    out = render(src, segs, lambda s: zh[s.text])
    assert out == ("## 標題\n\n| 名稱 | 角色 |\n|---|---|\n| 一 | `c` |\n\n- 項目二\n\n"
                   "<details><summary>答案</summary>\n\n</details>")
    with pytest.raises(ValueError, match="only a top-level paragraph"):
        render(src, segs, lambda s: OMIT if s.text == "item two" else None)


def test_runtime_extraction_is_ast_based(repo):
    found = {e.msgid: (e.flags, [o[0] for o in e.occurrences]) for e in runtime_template(repo)}
    assert found == {
        "CPU thread time": ([], ["chunkprefill/sub/mod.py"]),
        "Right: {n} tokens.": (["python-brace-format"], ["chunkprefill/sub/mod.py"]),
        "Not yet.": ([], ["chunkprefill/sub/mod.py"]),
        "Budget {budget} tokens per step.": (["python-brace-format"],
                                             ["notebooks/01_demo.ipynb#code1"]),
        "Done.": ([], ["notebooks/01_demo.ipynb#code2"]),
        "waiting in queue": ([], ["notebooks/01_demo.ipynb#code2"])}
    # "not wrapped" (a plain print) and tr's own docstring example are not messages


def test_f_strings_in_tr_are_rejected():
    import ast
    tree = ast.parse('tr(f"{n} tokens")')
    with pytest.raises(ExtractError, match="not an f-string"):
        tr_calls(tree, {"tr"}, set(), "x.py")
    assert tr_calls(ast.parse("tr(LABELS[k])"), {"tr"}, set(), "x.py") == []


def test_english_change_becomes_fuzzy_with_the_old_english_kept(repo):
    _translated(repo)
    edit_english(repo, "The answer is 42.", "The answer is 42, as before.")
    update_all(repo)
    po = polib.pofile(str(repo.catalog_for(english_notebook(repo))))
    entry = po.find("The answer is 42, as before.")
    assert entry.fuzzy and entry.previous_msgid == "The answer is 42." and \
        entry.msgstr == "答案是 42。"
    before = repo.catalog_for(english_notebook(repo)).read_text()
    update_all(repo)  # idempotent: the old English stays beside the fuzzy entry
    assert repo.catalog_for(english_notebook(repo)).read_text() == before


def test_removed_english_leaves_an_obsolete_entry_that_complete_rejects(repo):
    _translated(repo)
    edit_english(repo, "- second item\n  continued\n", "")
    update_all(repo)
    problems = checks.complete(repo)
    assert len(problems) == 1 and "obsolete" in problems[0]


def test_an_english_prose_change_fails_until_its_translation_is_updated(repo):
    """Fresh + Complete together: the gate the issue asks for, step by step."""
    _translated(repo)
    assert checks.complete(repo) == [] and checks.fresh_catalogs(repo) == []
    edit_english(repo, "Worked answer", "Worked answers")
    # 1. the English changed, the catalog did not: Fresh fails (and Complete sees it missing)
    assert any("run make i18n" in p for p in checks.fresh_catalogs(repo))
    assert any("not in the catalog" in p for p in checks.complete(repo))
    # 2. make i18n: now fresh, but the entry is fuzzy with the old English: Complete fails
    update_all(repo)
    assert checks.fresh_catalogs(repo) == []
    assert [p for p in checks.complete(repo) if "fuzzy" in p and "'Worked answer'" in p]
    # 3. the translator updates it and clears the flag: both pass
    translate(repo.catalog_for(english_notebook(repo)), {"Worked answers": "詳解"})
    assert checks.complete(repo) == [] and checks.fresh_catalogs(repo) == []


def test_a_new_runtime_string_fails_until_translated(repo):
    _translated(repo)
    mod = repo.package / "sub" / "mod.py"
    mod.write_text(mod.read_text() + '\n\ndef hint() -> str:\n    return tr("Try again.")\n')
    assert any("runtime.po" in p for p in checks.fresh_catalogs(repo))
    update_all(repo)
    assert any("untranslated: 'Try again.'" in p for p in checks.complete(repo))


def test_runtime_json_holds_only_finished_translations(repo):
    _translated(repo)
    assert json.loads(repo.runtime_json.read_text()) == RUNTIME
    po = polib.pofile(str(repo.runtime_po))
    po.find("Done.").flags.append("fuzzy")
    po.save()
    assert any("not runtime.po compiled" in p for p in checks.fresh_catalogs(repo))
    update_all(repo)
    assert "Done." not in json.loads(repo.runtime_json.read_text())


def _write_edition(repo):
    nb = render_notebook(repo, english_notebook(repo), Article.load(repo))
    repo.edition.mkdir(parents=True, exist_ok=True)
    path = repo.edition / "01_demo.ipynb"
    nbformat.write(nb, path)
    return path


def test_rendered_notebook_same_code_one_setup_cell_translated_prose(repo):
    _translated(repo)
    path = _write_edition(repo)
    zh, en = nbformat.read(path, 4), nbformat.read(english_notebook(repo), 4)
    assert [c.get("id") for c in zh.cells] == ["md0", SETUP_TAG, "code0", "md1", "code1", "code2"]
    assert zh.cells[1].source.endswith('set_language("zh-TW")')
    assert zh.cells[0].source == (
        "# 示範 · 預算\n\nDecode 正在串流時，一條長 prompt 進來了。文章寫道：「假設每個 step 的 "
        "token budget 是 16。」\n\n> 長 Prefill step 變很久 → Decode requests 這一步無法前進")
    assert "| 00 | 16 個 tokens 的 `tiny` trace | `x_y` |" in zh.cells[3].source
    assert checks.same_experiment(en, zh, "zh") == []
    assert checks.fresh_render(repo, english_notebook(repo), path) == []
    assert render_notebook(repo, english_notebook(repo), Article.load(repo)) == \
        render_notebook(repo, english_notebook(repo), Article.load(repo))  # deterministic


def test_fresh_render_catches_a_hand_edit_and_stale_outputs(repo):
    _translated(repo)
    path = _write_edition(repo)
    nb = nbformat.read(path, 4)
    nb.cells[0].source += " 手改的一句。"
    nbformat.write(nb, path)
    assert any("differs from its rendering" in p
               for p in checks.fresh_render(repo, english_notebook(repo), path))
    _write_edition(repo)
    edit_english(repo, 'print("not wrapped")', 'print("changed code")')
    assert any("stale outputs, code_sha256 changed" in p
               for p in checks.fresh_render(repo, english_notebook(repo), path))


def test_same_experiment_catches_a_changed_code_cell(repo):
    _translated(repo)
    path = _write_edition(repo)
    zh, en = nbformat.read(path, 4), nbformat.read(english_notebook(repo), 4)
    zh.cells[4].source = zh.cells[4].source.replace("16", "32")
    assert checks.same_experiment(en, zh, "zh") == ["zh: code cell 1 differs from the English: "
                                                    f"{zh.cells[4].source[:60]!r}"]


def test_untranslated_segments_render_in_english_and_are_listed(repo):
    left: list[str] = []
    nb = render_notebook(repo, english_notebook(repo), Article.load(repo), left)
    assert len(left) == 11 and "Worked answer" in left
    assert nb.cells[0].source.startswith("# Demo · the budget\n\nA long prompt arrives")
    assert checks.complete(repo)  # and the gate fails on them


@pytest.mark.parametrize("english", sorted((ROOT / "notebooks").glob("*.ipynb")),
                         ids=lambda p: p.name[:2])
def test_every_english_notebook_segments_and_renders_back(english):
    """Phase 2 readiness: each English markdown cell cuts into segments, and rendering each
    segment as itself gives back the same segments (containers, tables, summaries intact)."""
    article = Article.load(Layout(ROOT))
    for cell in nbformat.read(english, 4).cells:
        if cell.cell_type == "markdown":
            segs = segments(cell.source, article.quotes)
            again = segments(render(cell.source, segs, lambda s: s.text), article.quotes)
            assert [(s.kind, s.text) for s in again] == [(s.kind, s.text) for s in segs]


def test_relink_points_relative_links_at_the_same_files_from_one_folder_deeper(repo):
    nbformat.write(nbformat.v4.new_notebook(), repo.english / "07_other.ipynb")  # no catalog
    before = ("See [a](01_demo.ipynb), [b](07_other.ipynb#top), [c](../chunkprefill/sub/mod.py),"
              " [d](../01_demo.ipynb), [e](https://example.org/x), [f](#here), [g](missing.md).\n"
              "```\n[code](07_other.ipynb)\n```")
    assert relink(before, repo) == (
        "See [a](01_demo.ipynb), [b](../07_other.ipynb#top), [c](../../chunkprefill/sub/mod.py),"
        " [d](../01_demo.ipynb), [e](https://example.org/x), [f](#here), [g](missing.md).\n"
        "```\n[code](07_other.ipynb)\n```")


def test_build_only_names_edition_notebooks(repo):
    from dev.i18n.notebook import build

    with pytest.raises(ValueError, match="only must name edition notebooks"):
        build(repo, run=False, only=["99"])
    # a number or a file name selects the notebook; nothing is executed with run=False
    for name in ("01", "01_demo.ipynb"):
        assert [line.split(":")[0] for line in build(repo, run=False, only=[name])] == [
            repo.rel(repo.edition / "01_demo.ipynb")]

"""Each zh-TW check on a passing and a failing synthetic case (the real edition's run is in
test_i18n_edition.py)."""

from __future__ import annotations

import nbformat
import polib
import pytest
from i18n_fixtures import ROOT

from dev.i18n import checks
from dev.i18n.catalog import BRACE_FLAG, Article
from dev.i18n.notebook import META, SETUP_TAG
from dev.i18n.report import entry_problems

TERMS = checks.load_terms(ROOT / "i18n" / "zh-TW" / "terms.md")
ARTICLE = Article.load(type("L", (), {"quotes": ROOT / "i18n" / "article.txt"})())
EN = ("The article: 「假設每個 step 的 token budget 是 16。」 Run `make test` 3 times, see "
      "[the docs](https://docs.vllm.ai/) and <b>this</b>.")
ZH = ("文章寫道：「假設每個 step 的 token budget 是 16。」執行 `make test` 3 次，請看"
      "[文件](https://docs.vllm.ai/)與 <b>這個</b>。")


def _prose(msgstr: str, msgid: str = EN) -> list[str]:
    return checks.faithful_prose(polib.POEntry(msgid=msgid, msgstr=msgstr), ARTICLE)


def test_faithful_prose_keeps_code_links_tags_digits_and_quotes():
    assert _prose(ZH) == []
    assert _prose(ZH.replace("`make test`", "make test")) == [
        "code spans differ: English {'make test': 1}, translation {}"]
    assert "link targets differ" in _prose(ZH.replace("docs.vllm.ai/", "docs.vllm.ai/en/"))[0]
    # the one link a translation may add: to its English original, one folder up
    assert _prose(ZH + "（[英文版](../00_course_map.ipynb)）") == []
    assert "link targets differ" in _prose(ZH + "（[英文版](https://example.com/)）")[0]
    assert "HTML tags differ" in _prose(ZH.replace("<b>這個</b>", "這個"))[0]
    assert "digits differ" in _prose(ZH.replace("3 次", "三次"))[0]
    reworded = ZH.replace("token budget 是 16", "token budget 為 16")
    assert _prose(reworded) == ["article quote not kept verbatim: 「假設每個 step 的 token "
                                "budget 是 16。」"]


def test_an_english_quote_that_is_not_the_articles_is_caught():
    bad = EN.replace("是 16", "為 16")
    assert _prose(ZH, msgid=bad)[0].startswith("English quotes the article inexactly")
    assert _prose("以「」引用。", msgid="Quoted 「in corner brackets」.") == []  # no CJK: no quote


def _runtime(msgid: str, msgstr: str) -> list[str]:
    return checks.faithful_runtime(polib.POEntry(msgid=msgid, msgstr=msgstr, flags=[BRACE_FLAG]))


def test_faithful_runtime_keeps_placeholders_and_digits():
    en = "From budget {b0} to {b1}: TTFT {ratio:.2f}x in 3 runs."
    assert _runtime(en, "token budget 從 {b0} 到 {b1}：3 次執行，TTFT 為 {ratio:.2f} 倍。") == []
    assert "placeholders differ" in _runtime(en, "從 {b0} 到 {b2}：3 次，{ratio:.2f} 倍。")[0]
    assert "placeholders differ" in _runtime(en, "從 {b0} 到 {b1}：3 次，{ratio:.1f} 倍。")[0]
    assert "not a valid format string" in _runtime(en, "從 {b0 到 {b1}：3 次，{ratio:.2f}。")[0]
    assert "digits differ" in _runtime(en, "從 {b0} 到 {b1}：三次，{ratio:.2f} 倍。")[0]


def test_taiwan_usage_characters_from_opencc_tables():
    bad = checks.non_taiwan_characters()
    assert {c for c in "台吃才了干里据" if c in bad} == set()  # each is also a Traditional form
    assert {c for c in "峰群秘床" if c in bad} == set()  # Taiwan's forms (TWVariants: 峯 -> 峰)
    assert bad["峯"] == "峰" and bad["羣"] == "群"
    assert bad["为"] == "為" and bad["爲"] == "為" and bad["着"] == "著" and bad["块"] == "塊"
    assert checks.taiwan("每個 step 的 token budget 是 16。", TERMS) == []
    assert checks.taiwan("这个 step", TERMS) == ["'这' is not Taiwan usage (write 這)",
                                                 "'个' is not Taiwan usage (write 個/箇)"]


def test_taiwan_usage_mainland_terms():
    assert checks.taiwan("預設把快取放在記憶體", TERMS) == []
    assert checks.taiwan("默認把緩存放在內存", TERMS) == [
        "mainland term '內存': write 記憶體", "mainland term '默認': write 預設",
        "mainland term '緩存': write 快取"]
    assert checks.taiwan("技術文件", TERMS) == ["mainland term '文件': write 檔案"]
    assert checks.taiwan("技術文件", TERMS, allowed={"文件"}) == []      # a warn term, allowed
    assert checks.taiwan("把內存清空", TERMS, allowed={"內存"}) != []   # an error term never is


def test_terms_the_article_keeps_in_english_stay_english():
    en = "A long prefill stalls the decodes; the token budget is 16."
    assert checks.kept_english(en, "長 Prefill 卡住 Decode；token budget 是 16。", TERMS) == []
    assert checks.kept_english(en, "長預填卡住解碼；預算是 16。", TERMS) == [
        "'Prefill' must stay in English, as the article writes it",
        "'Decode' must stay in English, as the article writes it",
        "'token budget' must stay in English, as the article writes it"]


@pytest.mark.parametrize("bad, rule", [
    ("第一行\n第二行", "a line break between two CJK"),
    ("他說“不要”。", "curly quotes"),
    ('他說"不要"。', "straight quotes"),
    ("先算 Prefill,再算 Decode。", "half-width punctuation"),
    ("這樣做.", "half-width punctuation"),
    ("結果(見下表)。", "half-width parentheses"),
    ("token budget是 16。", "no space between Chinese and Latin"),
    ("budget 是16。", "no space between Chinese and Latin"),
    ("用`assert`檢查。", "no space between Chinese and Latin"),
    ("等了{ms}毫秒。", "no space between Chinese and Latin"),
])
def test_typography_each_rule_fails_its_case(bad, rule):
    assert any(rule in p for p in checks.typography(bad))


def test_typography_passes_the_articles_own_style():
    ok = ("Continuous Batching：哪條 request 可以進入下一個 batch？用 `assert` 檢查（OSDI 2024），"
          "**Chunked Prefill** 把 prompt 切成段，詳見[文件](https://x.org/a,b)與 <https://x.org>。")
    assert checks.typography(ok) == []
    for line in ARTICLE.lines:  # the rules are the article's: its prose passes them
        if not line.startswith("= min("):
            assert checks.typography(line) == [], line


def _cell(source: str, text: str, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    if tags:
        cell.metadata["tags"] = tags
    return cell


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_same_numbers_compares_deterministic_outputs_only():
    setup = nbformat.v4.new_code_cell('set_language("zh-TW")')
    setup.metadata["tags"] = [SETUP_TAG]
    en = _nb(_cell("a", "From 64 to 288: 0.32x, 2.4x.\n"), _cell("b", "took 5.1 ms\n",
                                                                  ["nbval-ignore-output"]),
             _cell("# NBVAL_IGNORE_OUTPUT\nc", "took 7 ms"))
    zh = _nb(setup, _cell("a", "從 64 到 288：2.4 倍、0.32 倍。\n"),
             _cell("b", "花了 9.9 ms\n", ["nbval-ignore-output"]),
             _cell("# NBVAL_IGNORE_OUTPUT\nc", "花了 8 ms"))
    assert checks.same_numbers(en, zh, "zh") == []
    zh.cells[1].outputs[0].text = "從 64 到 288：2.40 倍、0.32 倍。\n"
    assert checks.same_numbers(en, zh, "zh") == [
        "zh: code cell 0 prints other numbers than the English (differing: {'2.4': 1, '2.40': 1})"]


def _drawn(*texts, font="Noto Sans CJK TC", missing=""):
    cell = nbformat.v4.new_code_cell("plot()")
    cell.metadata[META] = {"figures": [[{"text": t, "font": font, "missing": missing}
                                        for t in texts]]}
    return _nb(cell)


def test_figure_texts_no_english_tc_font_no_missing_glyph():
    assert checks.figure_problems(_drawn("每個 step 的 ITL（ms）", "16", "P99"), TERMS, [],
                                  "zh") == []
    eng = _drawn("model forward (executor)")
    assert "English figure text 'model forward (executor)'" in \
        checks.figure_problems(eng, TERMS, [], "zh")[0]
    assert checks.figure_problems(eng, TERMS, ["model forward (executor)"], "zh") == []
    assert "no longer drawn" in checks.figure_problems(_drawn("16"), TERMS, ["old"], "zh")[0]
    assert "not a Traditional-Chinese CJK font" in \
        checks.figure_problems(_drawn("時間", font="DejaVu Sans"), TERMS, [], "zh")[0]
    assert "no font has '時'" in checks.figure_problems(_drawn("時間", missing="時"), TERMS, [],
                                                      "zh")[0]


def test_english_words_spares_code_acronyms_units_and_kept_terms():
    assert checks.english_words("Scheduler.schedule() 在 P99 ITL 下 12 ms, num_tokens", TERMS) \
        == []
    assert checks.english_words("tokens appended, finished requests", TERMS) == [
        "appended", "finished"]
    # a code-like word glued to others by CJK punctuation does not hide them
    assert checks.english_words("V1，不切段，token budget 64", TERMS) == []
    assert checks.english_words("V1，不切段，budget 64", TERMS) == ["budget"]


def test_a_catalog_entry_gets_every_text_check():
    entry = polib.POEntry(msgid="A long prefill stalls.", msgstr="長預填卡住了,內存不足")
    found = entry_problems(entry, ARTICLE, TERMS, runtime=False)
    assert any("mainland term '內存'" in p for p in found)
    assert any("'Prefill' must stay" in p for p in found)
    assert any("half-width punctuation" in p for p in found)


def test_code_reading_a_path_relative_to_notebooks_is_caught():
    ok = _nb(_cell('path = files("chunkprefill") / "data"', ""))
    bad = _nb(_cell('Path("../tests/data/vllm_prefix_traces.json")', ""))
    assert checks.no_relative_paths(ok, "en") == []
    assert checks.no_relative_paths(bad, "en") == [
        "en: code cell 0 uses a path relative to notebooks/: "
        "'\"../tests/data/vllm_prefix_traces.json\"'"]

"""A small synthetic repository for the zh-TW machinery's tests: one English notebook with every
kind of segment, a package module with tr calls, the real terms list, and a two-line article."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dev.i18n.catalog import Layout  # noqa: E402

ARTICLE = ("長 Prefill step 變很久\n→ Decode requests 這一步無法前進\n"
           "假設每個 step 的 token budget 是 16。\n")

MARKDOWN = [
    "# Demo · the budget\n\nA long prompt arrives while decodes stream. The article:\n"
    "「假設每個 step 的 token budget 是 16。」\n\n"
    "> 長 Prefill step 變很久\n> → Decode requests 這一步無法前進\n\n"
    "*A long prefill step takes long; decode requests cannot advance.*",
    "## Table\n\n| # | what | where |\n|---|---|---|\n| 00 | a `tiny` trace of 16 tokens | "
    "`x_y` |\n\n- first item with [a link](https://example.org/a)\n- second item\n  continued\n\n"
    "```python\nprint('code fences are never extracted')\n```\n\n"
    "<details><summary>Worked answer</summary>\n\nThe answer is 42.\n\n</details>",
]

CODE = [
    "%matplotlib inline\nfrom chunkprefill.i18n import tr as say\nimport chunkprefill.i18n as i18n",
    'print(say("Budget {budget} tokens per step.", budget=16))\nprint("not wrapped")',
    'print(i18n.tr("Done."))\nLABEL = i18n.N_("waiting in queue")',
]

MODULE = ('from ..i18n import N_, tr\n\nCLOCKS = {"cpu": N_("CPU thread time")}\n\n\n'
          'def verdict(n: int) -> str:\n'
          '    return tr("Right: {n} tokens.", n=n) if n else tr("Not yet.")\n')

# What a careful translator writes for the fixture (the tests remove or change pieces of it).
PROSE = {
    "Demo · the budget": "示範 · 預算",
    "A long prompt arrives while decodes stream. The article: 「假設每個 step 的 token budget 是 "
    "16。」": "Decode 正在串流時，一條長 prompt 進來了。文章寫道："
             "「假設每個 step 的 token budget 是 16。」",
    "*A long prefill step takes long; decode requests cannot advance.*": "",
    "Table": "表格",
    "what": "內容",
    "where": "位置",
    "a `tiny` trace of 16 tokens": "16 個 tokens 的 `tiny` trace",
    "first item with [a link](https://example.org/a)": "第一項，附[連結](https://example.org/a)",
    "second item continued": "第二項，接續",
    "Worked answer": "詳解",
    "The answer is 42.": "答案是 42。",
}
RUNTIME = {
    "CPU thread time": "CPU 執行緒時間",
    "Right: {n} tokens.": "答對了：{n} 個 tokens。",
    "Not yet.": "還不對。",
    "Budget {budget} tokens per step.": "每個 step 的 token budget 是 {budget}。",
    "Done.": "完成。",
    "waiting in queue": "在佇列中等待",
}


def make_repo(root: Path) -> Layout:
    """Write the fixture repository under ``root`` and return its layout (no catalogs yet)."""
    (root / "notebooks").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(MARKDOWN[0], id="md0"),
                nbformat.v4.new_code_cell(CODE[0], id="code0"),
                nbformat.v4.new_markdown_cell(MARKDOWN[1], id="md1"),
                nbformat.v4.new_code_cell(CODE[1], id="code1"),
                nbformat.v4.new_code_cell(CODE[2], id="code2")]
    nbformat.write(nb, root / "notebooks" / "01_demo.ipynb")
    (root / "chunkprefill" / "sub").mkdir(parents=True)
    (root / "chunkprefill" / "sub" / "mod.py").write_text(MODULE)
    (root / "i18n" / "zh-TW").mkdir(parents=True)
    (root / "i18n" / "article.txt").write_text(ARTICLE)
    shutil.copy(ROOT / "i18n" / "zh-TW" / "terms.md", root / "i18n" / "zh-TW" / "terms.md")
    layout = Layout(root)
    layout.catalogs.mkdir(parents=True)
    (layout.catalogs / "01_demo.po").touch()
    return layout


def translate(po_path: Path, table: dict[str, str], omit: set[str] = frozenset()) -> None:
    """Fill a catalog as a translator would: msgstr from ``table``, clear fuzzy flags."""
    import polib

    po = polib.pofile(str(po_path))
    for e in po:
        if e.msgid in table:
            e.msgstr = table[e.msgid]
            if "fuzzy" in e.flags:
                e.flags.remove("fuzzy")
            e.previous_msgid = None
        if e.msgid in omit or (e.msgid in table and not table[e.msgid]):
            e.tcomment = "i18n: omit"
    po.save(str(po_path))


def english_notebook(layout: Layout) -> Path:
    return layout.english / "01_demo.ipynb"


def edit_english(layout: Layout, old: str, new: str) -> None:
    path = english_notebook(layout)
    nb = nbformat.read(path, 4)
    for cell in nb.cells:
        cell.source = cell.source.replace(old, new)
    nbformat.write(nb, path)

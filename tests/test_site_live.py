"""The live trace page's Python (site/live/trace_page.py), on CPython: the schedule it shows
is the package's, its picture has the meaning of notebook 02's panel (checked cell by cell
against the package's own timeline data), and it imports nothing heavy. The browser test
(tests/browser/test_site.py) runs the same file in Pyodide."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chunkprefill
from chunkprefill import CacheConfig, SchedulerConfig, run_trace

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "site" / "live" / "trace_page.py"


def _load_page():
    spec = importlib.util.spec_from_file_location("trace_page", PAGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


page = _load_page()


def _package_function(name: str):
    """The package's own function ``name``, wherever the package keeps it (modules move)."""
    for info in pkgutil.walk_packages(chunkprefill.__path__, "chunkprefill."):
        spec = importlib.util.find_spec(info.name)
        if spec.origin and spec.origin.endswith(".py") \
                and f"def {name}(" in Path(spec.origin).read_text():
            return getattr(importlib.import_module(info.name), name)
    raise AssertionError(f"chunkprefill defines no {name}()")


def test_article_trace_by_hand():
    """The article's rule, by hand: the six decodes take 1 token each of the 16, P the 10
    left, so 40 = 4 x 10 in steps 2-5 (P arrives at step 2); with budget 20, 20 - 6 = 14:
    14 + 14 + 12 = 40 in steps 2-4; a threshold of 4 caps P at 4: ten chunks."""
    assert page.render(16, 6, 40, 0, True)["chunks"] == [(2, 10), (3, 10), (4, 10), (5, 10)]
    assert page.render(20, 6, 40, 0, True)["chunks"] == [(2, 14), (3, 14), (4, 12)]
    assert page.render(16, 6, 40, 4, True)["chunks"] == [(k, 4) for k in range(2, 12)]
    assert page.render(16, 6, 40, 0, True)["summary"] == (
        "P's prompt ran as 4 chunk(s) [10, 10, 10, 10] in steps 2-5; its first decode is step 6.")


def test_chunking_off_shows_the_schedulers_own_error():
    """Chunking off: max_model_len is the longest sequence, 40 prompt + 3 output = 43 > 16."""
    shown = page.render(16, 6, 40, 0, False)
    with pytest.raises(ValueError) as refused:
        SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16, enable_chunked_prefill=False,
                        max_model_len=43)
    assert shown["error"] == str(refused.value)
    assert "max_num_batched_tokens (16) is smaller than max_model_len (43)" in shown["error"]
    # from 43 on it is accepted, and P runs whole once it fits beside the decodes
    assert page.render(43, 6, 40, 0, False)["error"] is None


POSITIONS = list(itertools.product((1, 5, 16, 20, 64, 128), (0, 1, 6, 16), (1, 10, 40, 128),
                                   (0, 4, 64), (True, False)))


@pytest.mark.parametrize("budget,decodes,prompt,threshold,chunked", POSITIONS)
def test_picture_means_what_the_panel_means(budget, decodes, prompt, threshold, chunked):
    """Every cell kind and token count equals the package's own timeline grid (the data
    notebook 02's picture is drawn from), the bars add up to the budget, and the table is
    the package's table."""
    timeline_grid = _package_function("timeline_grid")
    kinds = importlib.import_module(timeline_grid.__module__).TIMELINE_KINDS
    shown = page.render(budget, decodes, prompt, threshold, chunked)
    try:
        config = page.scheduler_config(budget, decodes, prompt, threshold, chunked)
    except ValueError as e:
        assert shown["error"] == str(e)
        return
    requests = page.workload(decodes, prompt)
    steps = run_trace(requests, config, CacheConfig(page.BLOCK_SIZE, page.NUM_BLOCKS))
    ids, kind_codes, tokens = timeline_grid(steps)
    assert ids == list(dict.fromkeys(r for s in steps for r in s.num_scheduled_tokens))
    grid = page.cell_kinds(steps)
    for i, rid in enumerate(ids):
        for k in range(len(steps)):
            expected = (kinds[kind_codes[i, k]], int(tokens[i, k]))
            assert grid[k].get(rid, ("absent", 0)) == expected, (rid, k)
    assert shown["table"] == chunkprefill.format_trace_table(steps)
    assert shown["svg"].count('data-kind="prefill"') == sum(
        kinds[c] == "prefill" for c in kind_codes.ravel())
    bars = re.findall(r'class="lt-bar-\w+" data-step="(\d+)" data-tokens="(\d+)"', shown["svg"])
    per_step = [0] * len(steps)
    for k, n in bars:
        per_step[int(k)] += int(n)
    assert per_step == [budget] * len(steps)


@pytest.mark.parametrize("budget,decodes,prompt,threshold,chunked",
                         [(16, 6, 40, 0, True), (20, 6, 40, 0, True), (16, 6, 40, 4, True),
                          (43, 6, 40, 0, False), (16, 6, 40, 0, False), (5, 16, 128, 64, True)])
def test_page_says_what_notebook_02s_panel_says(budget, decodes, prompt, threshold, chunked):
    """The page's summary line and error are the panel's (which cannot run in Pyodide)."""
    panel = importlib.import_module(_package_function("trace_panel_update").__module__)
    assert page.CHUNKED_MAX_MODEL_LEN == panel.CHUNKED_MAX_MODEL_LEN
    table, _, error = panel.trace_panel_update(budget, decodes, prompt, threshold, chunked)
    shown = page.render(budget, decodes, prompt, threshold, chunked)
    assert shown["error"] == error
    if error is None:
        assert shown["summary"] == table.splitlines()[0]


def test_page_imports_only_the_scheduler_side():
    """In Pyodide there is no numpy, torch or matplotlib: the page must not need them."""
    code = (f"import sys; sys.path.insert(0, {str(PAGE.parent)!r}); import trace_page; "
            "trace_page.render_json(16, 6, 40, 0, True); "
            "print(sorted(m for m in ('numpy', 'torch', 'matplotlib', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_page_speaks_its_editions_language():
    """``start("zh-TW")`` (what the zh-TW tree's script calls): every word the page draws comes
    from the package's zh-TW catalog, the numbers are the same, and the scheduler's refusal
    stays vLLM's English. Run in a fresh interpreter: set_language is process-wide."""
    code = (f"import sys, json; sys.path.insert(0, {str(PAGE.parent)!r}); import trace_page; "
            "status = trace_page.start('zh-TW'); "
            "print(json.dumps([status, trace_page.render(16, 6, 40, 0, True), "
            "trace_page.render(16, 6, 40, 0, False)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CHUNKPREFILL_LANG": "en"})
    status, shown, refused = json.loads(out.stdout)
    zh = json.loads((ROOT / "chunkprefill" / "locale" / "zh-TW.json").read_text())
    english = page.render(16, 6, 40, 0, True)
    assert shown["chunks"] == [list(c) for c in english["chunks"]]  # same schedule
    assert shown["table"] == english["table"]  # a CLI table: English in every edition
    assert shown["summary"] == zh["{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in steps "
                                  "{first}-{last}; its first decode is step {decode}."].format(
        prompt_id="P", n=4, sizes=[10, 10, 10, 10], first=2, last=5, decode=6)
    for message in page.LABELS.values():
        if f">{message}<" in english["legend"]:
            assert f">{zh[message]}<" in shown["legend"] and message not in shown["legend"]
    assert zh[page.SVG_TITLE].format(budget=16) in shown["svg"]
    assert zh[page.SVG_AXIS] in shown["svg"] and page.SVG_AXIS not in shown["svg"]
    template = zh["chunkprefill {version} on Python {python} in Pyodide; modules loaded "
                  "besides the standard library: none"]
    assert re.fullmatch(re.escape(template).replace(r"\{version\}", r"\S+").replace(
        r"\{python\}", r"\S+"), status), status
    assert refused["error"] == page.render(16, 6, 40, 0, False)["error"]  # vLLM's English
    assert refused["refused"] == zh["The scheduler refuses this configuration:"]
    assert refused["note"] == zh[page.CHUNKING_OFF_NOTE]


def test_every_word_the_page_shows_is_in_the_catalog():
    """The page's static texts and labels are catalog entries (make i18n extracts
    site/live/*.py), translated in every shipped language."""
    from chunkprefill.i18n import available_languages

    messages = [*page.LABELS.values(), *page.CONTROL_LABELS.values(), *page.PAGE_TEXTS.values(),
                page.CHUNKING_OFF_NOTE, page.SVG_TITLE, page.SVG_LABEL, page.SVG_AXIS]
    for language in set(available_languages()) - {"en"}:
        catalog = json.loads((ROOT / "chunkprefill" / "locale" / f"{language}.json").read_text())
        assert [m for m in messages if m not in catalog] == [], language

"""chunkprefill.i18n: tr's contract, language switching, strict mode, subprocesses, the CJK font
and the figure audit the zh-TW build stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from i18n_fixtures import ROOT

from chunkprefill import i18n
from dev.i18n import checks

ZH = {"Right: {n} tokens.": "答對了：{n} 個 tokens。", "Step time": "每個 step 的時間"}


@pytest.fixture
def zh(monkeypatch):
    """zh-TW with a fixture catalog; English again afterwards (fonts included)."""
    monkeypatch.setitem(i18n._catalogs, "zh-TW", dict(ZH))
    monkeypatch.delenv(i18n.ENV_STRICT, raising=False)
    i18n.set_language("zh-TW")
    yield
    i18n.set_language("en")


def test_english_is_the_identity_and_fields_are_named():
    assert i18n.tr("Right: {n} tokens.", n=3) == "Right: 3 tokens."
    assert i18n.tr("the dict {request_id: num_tokens}") == "the dict {request_id: num_tokens}"
    with pytest.raises(ValueError, match=r"exactly the message's placeholders \['n'\]"):
        i18n.tr("Right: {n} tokens.", m=3)
    with pytest.raises(ValueError, match="named placeholders"):
        i18n.tr("{} tokens", n=3)
    assert i18n.N_("waiting in queue") == "waiting in queue"


def test_set_language_names_the_allowed_languages():
    with pytest.raises(ValueError, match=r"language must be one of \['en', .*'zh-TW'"):
        i18n.set_language("zh_TW")
    assert "zh-TW" in i18n.available_languages()


def test_zh_lookup_fallback_and_strict(zh, monkeypatch):
    assert i18n.tr("Right: {n} tokens.", n=3) == "答對了：3 個 tokens。"
    assert i18n.tr("Not in the catalog.") == "Not in the catalog."
    monkeypatch.setenv(i18n.ENV_STRICT, "1")
    with pytest.raises(LookupError, match="no zh-TW translation for 'Not in the catalog.'"):
        i18n.tr("Not in the catalog.")


def test_shipped_catalog_loads_and_a_subprocess_follows_the_language():
    i18n.set_language("zh-TW")
    try:
        assert os.environ[i18n.ENV_LANGUAGE] == "zh-TW"
        out = subprocess.run([sys.executable, "-c", "from chunkprefill import i18n; "
                              "print(i18n.get_language())"], capture_output=True, text=True,
                             check=True, cwd=ROOT)
        assert out.stdout.strip() == "zh-TW"
    finally:
        i18n.set_language("en")
    assert os.environ[i18n.ENV_LANGUAGE] == "en"


def test_zh_figures_use_the_taiwan_cjk_font_and_english_again_after(zh):
    import matplotlib
    from matplotlib import font_manager
    assert matplotlib.rcParams["font.sans-serif"][0] == "Noto Sans CJK TC"
    assert matplotlib.rcParams["font.monospace"][0] == "Noto Sans Mono CJK TC"
    found = font_manager.findfont(font_manager.FontProperties(family="Noto Sans CJK TC"),
                                  fallback_to_default=False)
    assert "NotoSansCJK" in str(found)
    i18n.set_language("en")
    assert matplotlib.rcParams["font.sans-serif"][0] != "Noto Sans CJK TC"


def test_a_missing_font_fails_with_the_command_to_install_it(monkeypatch):
    monkeypatch.setitem(i18n.FONTS, "zh-TW", {"font.sans-serif": "No Such CJK Font"})
    monkeypatch.setitem(i18n._catalogs, "zh-TW", {})
    with pytest.raises(RuntimeError, match="apt-get install fonts-noto-cjk"):
        i18n.set_language("zh-TW")
    assert i18n.get_language() == "en"


def _figure(title: str, family: str | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(3, 2))
    ax = fig.add_subplot()
    ax.plot([0, 1], [16, 10])
    ax.set_title(title, **({"family": family} if family else {}))
    ax.set_xlabel("step")
    FigureCanvasAgg(fig).draw()
    return fig


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
def test_figure_drawn_in_zh_keeps_no_english_and_finds_its_font(zh):
    terms = checks.load_terms(ROOT / "i18n" / "zh-TW" / "terms.md")
    texts = i18n.figure_texts(_figure(i18n.tr("Step time")))
    assert {t["text"] for t in texts} >= {"每個 step 的時間", "step", "16"}
    assert all(t["font"] == "Noto Sans CJK TC" and not t["missing"] for t in texts)
    assert [w for t in texts for w in checks.english_words(t["text"], terms)] == []
    # failing cases: an English title, and a font without CJK glyphs
    title = [t for t in i18n.figure_texts(_figure("Step time per budget"))
             if t["text"] == "Step time per budget"][0]
    assert checks.english_words(title["text"], terms) == ["time", "per", "budget"]
    no_cjk = [t for t in i18n.figure_texts(_figure("每個 step 的時間", family="DejaVu Sans"))
              if t["text"] == "每個 step 的時間"][0]
    assert no_cjk["font"] == "DejaVu Sans" and no_cjk["missing"] == "個時每的間"


def test_the_build_audit_records_each_drawn_figure(zh, monkeypatch, tmp_path):
    from matplotlib.figure import Figure
    monkeypatch.setattr(Figure, "draw", Figure.draw)  # the audit's patch is undone after
    log = tmp_path / "figures.jsonl"
    monkeypatch.setenv(i18n.ENV_AUDIT, str(log))
    i18n.set_language("zh-TW")
    _figure(i18n.tr("Step time"))
    [record] = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"text": "每個 step 的時間", "font": "Noto Sans CJK TC", "missing": ""} in record

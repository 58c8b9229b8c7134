"""The GPU notebooks' model sizing, checked on the CPU from a datasheet's numbers."""

import pytest

from chunkprefill.gpu import gpu_peaks, size_weight_bound_model
from chunkprefill.i18n import set_language


def test_a100_sizing_meets_its_margin_and_explains_it():
    peaks = gpu_peaks("A100 80GB PCIe")
    sizing = size_weight_bound_model(peaks, host_s_per_layer=20e-6, margin=3.0)
    assert sizing.config.hidden_size % 1024 == 0
    assert sizing.read_s_per_layer >= 3.0 * 20e-6  # the asked-for margin over the launch time
    # ridge = 312e12 FLOP/s / 1935e9 B/s = 161 FLOP/byte; with 2-byte weights the knee is
    # ridge * 2 / 2 = 161 tokens
    text = sizing.explain()
    assert "161 FLOP per byte" in text and "~161 tokens per step" in text


def test_explain_is_translated(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CHUNKPREFILL_I18N_STRICT", "1")  # a missing translation raises
    sizing = size_weight_bound_model(gpu_peaks("A100 80GB PCIe"))
    set_language("zh-TW")
    try:
        text = sizing.explain()
    finally:
        set_language("en")
    assert "161" in text and "memory bound" not in text

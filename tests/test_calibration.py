"""Calibration on real GPUs: the Yi-34B / A100-80GB-PCIe presets by hand, the fit recovering
known terms from data the cost model made itself, the fit on the Sarathi-Serve authors'
measurements within a stated residual, the shipped data and its units."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from chunkprefill import SchedulerConfig
from chunkprefill.data import TABLE2_FOLDER, sarathi_serve_batches, sharegpt_lengths
from chunkprefill.sim import (
    CostModel,
    HardwareSpec,
    ModelSpec,
    fit_efficiencies,
    named_calibration,
    prefill_chunk_times,
    simulate,
)
from chunkprefill.sim.calibration import sarathi_serve_steps
from chunkprefill.workload import WorkloadRequest

ROOT = Path(__file__).resolve().parents[1]
YI = ModelSpec.preset("yi-34b", 2)
PCIE = HardwareSpec.preset("a100-80gb-pcie")


def test_yi_34b_parameter_count_by_hand():
    # Per layer: q 7168*7168 + k,v 2*7168*1024 + o 7168*7168 + MLP 3*7168*20480 = 557,842,432;
    # 60 layers = 33,470,545,920; embedding and LM head 64000*7168 = 458,752,000 each; norms
    # 121*7168. Total 34,388,917,248: the published "34B" (34.4B on the model card).
    assert YI.num_params == 34_388_917_248
    assert YI.tensor_parallel_size == 2 and YI.max_model_len == 200_000
    # K+V per token and GPU: 2 * 60 layers * 4 KV heads (8 / TP 2) * 128 dims * 2 bytes.
    assert YI.kv_bytes_per_token == 122_880
    assert PCIE.peak_flops == 312e12 and PCIE.mem_bandwidth == 1935e9
    assert PCIE.interconnect_bandwidth == 300e9


def test_preset_names_are_case_insensitive():
    assert ModelSpec.preset("YI-34B") == ModelSpec.preset("Yi-34B") == YI
    assert HardwareSpec.preset("A100-80GB-PCIe") == PCIE
    assert ModelSpec.preset("mistral-7b") == ModelSpec.mistral_7b()


# ----------------------------------------------------------------- recovering known terms

TRUE = dict(linear_efficiency=0.58, attention_efficiency=0.31, bandwidth_efficiency=0.74,
            step_overhead_s=0.021, per_seq_overhead_s=4e-4)


def synthetic_batches() -> list[list[tuple[int, int]]]:
    """Prefills, chunks deep in a prompt, decodes at several contexts and hybrids: enough
    variety for every term to matter somewhere."""
    out: list[list[tuple[int, int]]] = [[(p, 0)] for p in (128, 512, 2048, 8192, 16384)]
    out += [[(512, c)] for c in (2048, 8192)]
    out += [[(1, c)] * n for n in (1, 8, 64, 128) for c in (512, 4096)]
    out += [[(1000, 3000)] + [(1, 2000)] * 24, [(256, 0)] + [(1, 1000)] * 100]
    return out


def test_fit_recovers_known_terms_from_its_own_predictions():
    truth = CostModel(YI, PCIE, **TRUE)
    batches = synthetic_batches()
    secs = [truth.step_time(b) for b in batches]
    linear = [truth.step_breakdown(b)["linear"] if i % 4 == 0 else None
              for i, b in enumerate(batches)]
    cal = fit_efficiencies(YI, PCIE, batches, secs, linear)
    for name, value in TRUE.items():
        assert getattr(cal.cost_model, name) == pytest.approx(value, rel=1e-3), name
    assert cal.max_abs_error < 1e-6


def test_fit_without_linear_times_still_recovers_when_the_data_separate_the_terms():
    # A step overhead and a slower weight stream both add a constant to every step, unless
    # some steps are compute bound in their linear layers (then the weights stop counting):
    # the large prefills here make the two separable from totals alone.
    truth = CostModel(YI, PCIE, **TRUE)
    batches = synthetic_batches()
    cal = fit_efficiencies(YI, PCIE, batches, [truth.step_time(b) for b in batches])
    assert cal.max_abs_error < 1e-4


N = len(synthetic_batches())


@pytest.mark.parametrize("bad, match", [
    (dict(durations=[0.1] * (N - 1)), "one duration per batch"),
    (dict(durations=[0.1] * (N - 1) + [-1.0]), "durations must be finite and > 0"),
    (dict(linear_durations=[None] * 3), "linear_durations must have one entry"),
    (dict(linear_durations=[0.0] + [None] * (N - 1)), "linear_durations must be finite"),
    (dict(labels=["a"]), "labels must have one entry"),
])
def test_fit_efficiencies_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        fit_efficiencies(YI, PCIE, synthetic_batches(), **(dict(durations=[0.1] * N) | bad))


# ------------------------------------------------------------------ the real measurements

# Stated bound, from the fit (median |predicted/measured - 1| = 0.086, largest 0.379): median
# <= 0.12; every point within 0.25 except figure 2's 256-token prefill, which the authors
# measured *slower* than their 512-token one (121 vs 106 ms: run-to-run noise no monotone
# model can follow), within 0.45. The same 4-decode batch was measured 48.8 and 68.1 ms.
MEDIAN_BOUND, POINT_BOUND, OUTLIER_BOUND = 0.12, 0.25, 0.45


def test_fit_on_the_sarathi_serve_measurements_within_the_stated_residual():
    cal = named_calibration("sarathi-serve")
    r = dict(zip(cal.labels, cal.rel_residuals))
    assert cal.num_steps == len(r) == 19
    assert cal.median_abs_error <= MEDIAN_BOUND
    outlier = "figure 2 prefill: 256 prefill + 0 decode tokens"
    assert abs(r.pop(outlier)) <= OUTLIER_BOUND
    assert max(abs(v) for v in r.values()) <= POINT_BOUND
    by_tokens = {m.num_prefill_tokens: m.seconds for m in sarathi_serve_batches()
                 if m.source == "figure 2" and not m.num_decodes}
    assert by_tokens[256] > by_tokens[512]  # why that point is excused


def test_calibrated_terms_are_physical():
    cm = named_calibration("sarathi-serve").cost_model
    # Efficiencies strictly inside (0, 1), overheads of a Python engine without CUDA graphs.
    for name in ("linear_efficiency", "attention_efficiency", "bandwidth_efficiency"):
        assert 0.1 < getattr(cm, name) < 1.0, name
    assert 0.005 < cm.step_overhead_s < 0.06 and 0 < cm.per_seq_overhead_s < 0.003
    # Table 2 also timed the linear layers alone: the fitted linear term matches them.
    batches, _, linear, _ = sarathi_serve_steps()
    for b, measured in zip(batches, linear):
        if measured is not None:
            assert cm.step_breakdown(b)["linear"] == pytest.approx(measured, rel=0.15)


def test_assumed_decode_context_barely_matters():
    fits = []
    for ctx in (0, 4096):
        batches, secs, linear, _ = sarathi_serve_steps(decode_context_len=ctx)
        fits.append(fit_efficiencies(YI, PCIE, batches, secs, linear))
    assert np.max(np.abs(fits[0].rel_residuals - fits[1].rel_residuals)) < 0.02
    assert fits[0].cost_model.linear_efficiency == pytest.approx(
        fits[1].cost_model.linear_efficiency, rel=0.02)


def test_named_calibration_through_the_preset():
    cm = CostModel.preset("yi-34b", "a100-80gb-pcie", 2, calibrated="sarathi-serve")
    assert cm == named_calibration("sarathi-serve").cost_model
    assert CostModel.preset("Yi-34B", "A100-80GB-PCIe", calibrated="sarathi-serve") == cm
    tweaked = CostModel.preset("yi-34b", "a100-80gb-pcie", 2, calibrated="sarathi-serve",
                               gpu_memory_utilization=0.8)
    assert tweaked.gpu_memory_utilization == 0.8
    assert tweaked.linear_efficiency == cm.linear_efficiency
    with pytest.raises(ValueError, match="calibrated must be one of"):
        CostModel.preset("yi-34b", "a100-80gb-pcie", 2, calibrated="vidur")
    with pytest.raises(ValueError, match="was measured on Yi-34B TP2 on A100-80GB-PCIe"):
        CostModel.preset("yi-34b", "h100-sxm", 2, calibrated="sarathi-serve")


# ---------------------------------------------------------------------- prefill, chunked


def test_prefill_chunk_times_cut_as_the_scheduler_cuts():
    # The same prompt through the real scheduler (token budget = chunk size, nothing else
    # running) takes the same steps, and each step lasts what prefill_chunk_times says.
    cm = CostModel.preset("yi-34b", "a100-80gb-pcie", 2, calibrated="sarathi-serve")
    chunks = prefill_chunk_times(cm, 1000, 300)
    assert [(q, c) for q, c, _ in chunks] == [(300, 0), (300, 300), (300, 600), (100, 900)]
    res = simulate([WorkloadRequest("p", 0.0, 1000, 1)], cm,
                   SchedulerConfig.for_budget(300, max_model_len=4096))
    assert [s.num_scheduled_tokens for s in res.step_log] == [{"p": q} for q, _, _ in chunks]
    assert [s.duration_s for s in res.step_log] == pytest.approx([t for *_, t in chunks])
    whole = prefill_chunk_times(cm, 1000, 1000)
    assert len(whole) == 1 and whole == prefill_chunk_times(cm, 1000, 5000)
    assert sum(t for *_, t in chunks) > whole[0][2]  # chunking never makes it cheaper


def test_prefill_chunk_times_bad_input():
    cm = CostModel(YI, PCIE)
    with pytest.raises(ValueError, match=r"prompt_len must be an integer in \[1, 200000\]"):
        prefill_chunk_times(cm, 200_001, 512)
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
        prefill_chunk_times(cm, 100, 0)


# ------------------------------------------------------------------------- shipped data


def test_shipped_batches_and_units():
    batches = sarathi_serve_batches()
    assert [m.source for m in batches].count("figure 2") == 16 and len(batches) == 19
    # Units: figure 2 is in seconds, table 2 in milliseconds. Both measured a prefill-only
    # batch of 1024 tokens: converted, they agree within 2% (214.3 vs 217.2 ms).
    fig = next(m for m in batches if m.source == "figure 2" and m.num_prefill_tokens == 1024)
    tab = next(m for m in batches if m.source == TABLE2_FOLDER and m.num_prefill_tokens == 1024)
    assert fig.seconds == pytest.approx(tab.seconds, rel=0.02)
    assert 0.2 < tab.seconds < 0.25 and tab.linear_s < tab.seconds


def test_shipped_sharegpt_trace_matches_the_paper():
    prompt, output = sharegpt_lengths()
    assert len(prompt) == len(output) == 30_731
    # Sarathi-Serve, Table 2 (openchat_sharegpt4): prompt median 1730, P90 5696; output
    # median 415, P90 834 (also checked by the data README).
    assert np.median(prompt) == 1730 and np.percentile(prompt, 90) == 5696
    assert np.median(output) == 415 and np.percentile(output, 90) == 834
    assert (prompt + output).max() <= 8192  # "filtered to 8K"


def test_package_data_ships_the_files_with_their_license():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["chunkprefill.data"]
    data = ROOT / "chunkprefill" / "data"
    shipped = {p.relative_to(data).as_posix() for g in globs for p in data.glob(g)}
    on_disk = {p.relative_to(data).as_posix() for p in (data / "sarathi_serve").iterdir()}
    assert shipped == on_disk
    assert {"sarathi_serve/LICENSE", "sarathi_serve/README.md"} <= shipped
    assert "Apache License" in (data / "sarathi_serve" / "LICENSE").read_text()


def test_describe_never_prints_zero_valued_units():
    # A toy model on a CPU: tens of GFLOP/s and a few MB of weights. "0 TFLOP/s, 0.0 GB
    # weights/GPU" was the old print; SI prefixes keep three significant digits.
    toy = ModelSpec("toy", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                    intermediate_size=128, vocab_size=256, bytes_per_param=4)
    cpu = HardwareSpec("cpu", peak_flops=4.2e10, mem_bandwidth=1.5e10, memory_bytes=16e9)
    text = CostModel(toy, cpu).describe()
    assert "42 GFLOP/s" in text and "15 GB/s" in text
    assert f"{toy.weight_bytes_per_gpu / 1e3:.3g} kB weights/GPU" in text
    assert " 0 " not in text and "0.0 GB" not in text

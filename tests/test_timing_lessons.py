"""What notebooks 06 (the attention kernel) and 08 (live timing) print and draw, checked
independently of their stored outputs: the machine's measured peaks and the roofline knee they
imply, decode-only step times, the plots beside the Sarathi-Serve authors' A100 data (each curve
over its own machine's 1-decode step), the launch counter, the query-tile picture, the
break-it exercise, and the facts the two notebooks state (Triton's ``tl.dot`` minimum, the
authors' batch times read from their CSV files by hand)."""

from __future__ import annotations

import csv
import importlib
import os
from importlib import resources

import torch

# The launch-count test runs the Triton kernels: interpreted on a CPU, a switch read when the
# kernels are first imported (as tests/test_kernels.py sets it).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import matplotlib.colors as mcolors  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from chunkprefill import ModelConfig, ToyTransformer  # noqa: E402
from chunkprefill.attention import build_attention_metadata, ref_paged_attention  # noqa: E402
from chunkprefill.course import probes  # noqa: E402
from chunkprefill.course.exercises import kernel as ex  # noqa: E402
from chunkprefill.course.plots import kernel as kplots  # noqa: E402
from chunkprefill.course.plots.measured import (  # noqa: E402
    plot_chunking_overhead_beside_a100,
    plot_steps_beside_a100,
)
from chunkprefill.data import (  # noqa: E402
    TABLE2_FOLDER,
    sarathi_serve_batches,
    sarathi_serve_chunked_prefills,
)
from chunkprefill.lab.stats import Estimate  # noqa: E402
from chunkprefill.lab.step_cost import MachinePeaks, decode_step_times, measure_peaks  # noqa: E402


def _csv(name: str) -> list[dict[str, str]]:
    path = resources.files("chunkprefill.data").joinpath("sarathi_serve", name)
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------ measured peaks


def test_knee_is_ridge_times_bytes_over_two():
    # 2 P n FLOPs at F FLOP/s == P b bytes at B B/s  <=>  n = (F / B) b / 2, whatever P
    peaks = MachinePeaks("cpu", "float32", Estimate(100e9, 90e9, 110e9, 5),
                         Estimate(40e9, 35e9, 45e9, 5), 1024, 2**29)
    assert peaks.ridge_point == pytest.approx(2.5)
    assert peaks.knee_tokens(4) == pytest.approx(5.0)
    p = 3.7e6  # any model: arithmetic and weight read meet at the knee
    n = peaks.knee_tokens(2)
    assert 2 * p * n / 100e9 == pytest.approx(p * 2 / 40e9)
    with pytest.raises(ValueError, match="bytes_per_param"):
        peaks.knee_tokens(0)


def test_measure_peaks_reports_rates_with_intervals():
    torch.set_num_threads(1)
    peaks = measure_peaks("cpu", matmul_n=128, copy_bytes=2**21, repeats=3)
    assert peaks.matmul_flops.n == peaks.copy_bandwidth.n == 3
    for e in (peaks.matmul_flops, peaks.copy_bandwidth):
        assert 0 < e.low <= e.median <= e.high
    assert peaks.copy_bytes == 2 * 2**21  # read once plus written once, as STREAM counts a copy
    assert peaks.dtype == "float32" and peaks.ridge_point > 0
    with pytest.raises(ValueError, match="matmul_n"):
        measure_peaks("cpu", matmul_n=4)
    with pytest.raises(ValueError, match="copy_bytes"):
        measure_peaks("cpu", copy_bytes=1024)


def test_decode_step_times_grow_with_the_batch():
    torch.set_num_threads(1)
    model = ToyTransformer(ModelConfig.tiny(), seed=0)
    est = decode_step_times(model, [1, 64], decode_kv_len=256, repeats=3, warmup=0)
    assert len(est) == 2 and all(e.n == 3 for e in est)
    assert est[1].median > est[0].median  # 64 decodes' KV reads and arithmetic are not free here
    with pytest.raises(ValueError, match="batch size"):
        decode_step_times(model, [0])
    with pytest.raises(ValueError, match="decode_kv_len"):
        decode_step_times(model, [1], decode_kv_len=0)


# -------------------------------------------------------------------- the authors' data


def test_table2_folder_attention_is_read_in_seconds():
    rows = _csv("table2_hybrid_batches_yi34b_tp2_a100.csv")  # milliseconds in the file
    batches = [b for b in sarathi_serve_batches() if b.source == TABLE2_FOLDER]
    assert [b.attention_s for b in batches] == pytest.approx(
        [float(r["attention"]) / 1e3 for r in rows])
    assert batches[0].num_decodes == 4 and batches[0].attention_s == pytest.approx(2.995e-3,
                                                                                   rel=1e-3)
    assert all(b.attention_s is None for b in sarathi_serve_batches() if b.source == "figure 2")


def test_the_decode_plateau_the_notebooks_quote():
    # figure 2's decode file, in seconds: 1, 2 and 4 decodes take 46.8, 47.5 and 48.8 ms
    rows = {int(r["batch_num_decode_tokens"]): float(r["batch_execution_time"])
            for r in _csv("fig2_decode_batches_yi34b_tp2_a100.csv")}
    assert [round(rows[n] * 1e3, 1) for n in (1, 2, 4)] == [46.8, 47.5, 48.8]
    prefill = {int(r["batch_num_prefill_tokens"]): float(r["batch_execution_time"])
               for r in _csv("fig2_prefill_batches_yi34b_tp2_a100.csv")}
    assert prefill[128] / rows[1] == pytest.approx(1.03, abs=0.01)  # 08: "1.03x a lone decode"


# ------------------------------------------------------------------------------- plots


def _decodes(ratio: float) -> tuple[list[int], list[float]]:
    sizes = [1, 2, 4, 128]
    return sizes, [1e-3 * (1 + (ratio - 1) * (n - 1) / 127) for n in sizes]


def test_steps_beside_a100_divide_each_machine_by_its_own_lone_decode():
    batches = sarathi_serve_batches()
    dec = {b.num_decodes: b.seconds for b in batches
           if b.source == "figure 2" and not b.num_prefill_tokens}
    fig = plot_steps_beside_a100(([1, 1024], [2e-3, 0.2]), _decodes(10.0), batches, "X clock",
                                 knees={"here": 6.0, "A100": 161.0},
                                 fits={"here": (1e-3, 1e-4), "A100": (0.04, 1.6e-4)})
    prompt_ax, decode_ax = fig.axes[:2]
    lines = {tuple(np.round(ln.get_xdata(), 6)): ln.get_ydata() for ln in decode_ax.lines
             if len(ln.get_xdata()) > 2}
    a100 = lines[tuple(float(n) for n in sorted(dec))]
    assert a100[0] == pytest.approx(1.0) and a100[-1] == pytest.approx(dec[128] / dec[1])
    here = lines[(1.0, 2.0, 4.0, 128.0)]
    assert here[0] == pytest.approx(1.0) and here[-1] == pytest.approx(10.0)
    # the prompt panel: this machine's 1,024-token step is 200x its 1-decode step (0.2 / 1e-3)
    assert any(ln.get_ydata()[-1] == pytest.approx(200.0) for ln in prompt_ax.lines)
    assert "X clock" in fig._suptitle.get_text()
    assert any("161" in t.get_text() for t in prompt_ax.texts)
    with pytest.raises(ValueError, match="batch of 1"):
        plot_steps_beside_a100(None, ([2, 4], [1e-3, 2e-3]), batches, "X")
    assert len(plot_steps_beside_a100(None, _decodes(3.0), batches, "X").axes) == 1


def test_chunking_overhead_beside_a100_plots_every_authors_point():
    ratios = {64: Estimate(1.2, 1.1, 1.3, 5), 512: Estimate(1.0, 0.95, 1.05, 5)}
    fig = plot_chunking_overhead_beside_a100(ratios, 1024, "X", sarathi_serve_chunked_prefills())
    right = fig.axes[1]
    points = sorted(y for ln in right.lines for y in ln.get_ydata() if ln.get_linestyle() == "None")
    chunked = sorted(m.relative for m in sarathi_serve_chunked_prefills()
                     if m.chunk_size < m.prompt_len)
    assert points == pytest.approx(chunked) and len(points) == 11  # 2,047 in chunks of 2,048: whole


def test_query_tiles_colour_real_rows_and_grey_the_padding():
    fig = kplots.plot_query_tiles([("P", 17, 1)], block_q=16, group=3, group_padded=4)
    cells = fig.axes[0].patches
    assert len(cells) == 64  # BLOCK_M rows
    colors = [mcolors.to_hex(p.get_facecolor()) for p in cells]
    # tile 1 of a 17-token chunk holds one real token (16): rows 0-2 its 3 heads, row 3 padding
    assert colors[:3] == [mcolors.to_hex(c) for c in kplots.HEAD_COLORS[:3]]
    assert colors[3] == mcolors.to_hex(kplots.PADDED_HEAD)
    assert set(colors[4:]) == {mcolors.to_hex(kplots.PAST_CHUNK)}
    with pytest.raises(ValueError, match="group_padded"):
        kplots.plot_query_tiles([("P", 1, 0)], block_q=16, group=3, group_padded=2)


# ------------------------------------------------------------- launches and the kernel


def test_a_model_step_launches_the_store_and_the_attention_once_per_layer():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = ToyTransformer(ModelConfig.tiny(), seed=0, device=device)
    layers = model.config.num_hidden_layers
    kv = model.allocate_kv_cache(4, 16, device=device)
    # a decode (context 3) beside a 5-token chunk (context 11): both sample, so every layer runs
    meta, pos = build_attention_metadata([1, 5], [3, 11], [[0], [1]], 16, device)
    ids = torch.zeros(meta.num_tokens, dtype=torch.long, device=device)
    with probes.count_kernel_launches() as n:
        model.forward(ids, pos, kv, meta, backend="triton", logits_indices=[0, 5])
    assert n == {"store": layers, "attention": layers}
    with probes.count_kernel_launches() as n:  # a mid-prompt chunk: nothing samples
        model.forward(ids, pos, kv, meta, backend="triton", logits_indices=[])
    assert n == {"store": layers, "attention": layers - 1}
    unified = importlib.import_module("chunkprefill.kernels.unified_attention")
    assert type(unified.unified_attention_kernel).__name__ != "_CountedKernel"  # put back


def test_break_it_changes_every_sequence():
    # Worked by hand: without its context a decode's one query is "position 0" and sees key 0
    # only (not its 5 or 17 keys); P's queries lose the 17 cached keys. All three change.
    assert ex.check_break({"D1", "D2", "P"}).startswith("Right")
    assert ex.check_break({"P"}).startswith("Not yet")
    assert ex.check_break(None).startswith("Not yet")
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 8, generator=gen)
    k_cache, v_cache = torch.randn(2, 2, 16, 1, 8, generator=gen).unbind(0)
    args = (q, k_cache, v_cache, [2], [2], [[0]], 0.3)  # nothing cached: the bug is harmless
    assert torch.equal(ex.forget_the_context(*args), ref_paged_attention(*args))


def test_tl_dot_minimum_is_only_on_its_inner_dimension():
    # 06 says: in Triton 3.9 only K has a minimum, 16 for 16-bit inputs and 8 for fp32
    compiler = pytest.importorskip("triton.backends.nvidia.compiler")
    from triton.backends.compiler import GPUTarget

    check = compiler.min_dot_size(GPUTarget("cuda", 80, 32))

    class _T:
        def __init__(self, bits: int) -> None:
            self.scalar = type("S", (), {"primitive_bitwidth": bits})()

    assert check(_T(16), _T(16)) == (1, 1, 16)
    assert check(_T(32), _T(32)) == (1, 1, 8)

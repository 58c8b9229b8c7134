"""The cost-model simulator: roofline hand checks, monotonicity, "same scheduler" proofs,
the prefill-first vs chunked claims the course makes, calibration, and bad input."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkprefill import CacheConfig, ModelConfig, Scheduler, SchedulerConfig
from chunkprefill.sim import (
    CostModel,
    CostModelExecutor,
    HardwareSpec,
    ModelSpec,
    batches_from_step_log,
    budget_from_profiling,
    capacity_search,
    chunking_overhead,
    fit_cost_model,
    simulate,
    tbt_slo,
)
from chunkprefill.trace import TraceRequest, run_trace
from chunkprefill.workload import (
    LengthDist,
    WorkloadRequest,
    make_workload,
    poisson_arrivals,
    run_workload,
    sharegpt_like,
)

H100 = HardwareSpec.h100_sxm()
LLAMA3 = ModelSpec.llama3_8b()


def ideal(model: ModelSpec = LLAMA3, hw: HardwareSpec = H100) -> CostModel:
    """Every efficiency 1 and no overhead: the bare roofline, for hand checks."""
    return CostModel(model, hw, linear_efficiency=1.0, attention_efficiency=1.0,
                     bandwidth_efficiency=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0)


# ----------------------------------------------------------------------------- hand checks


def test_llama3_8b_parameter_count():
    # Per layer: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + MLP 3*4096*14336 = 218,103,808.
    # 32 layers = 6,979,321,856; embedding and LM head 128256*4096 = 525,336,576 each;
    # norms 65*4096. Total 8,030,261,248 (the published "8B").
    assert LLAMA3.body_params_per_gpu == 6_979_321_856
    assert LLAMA3.lm_head_params_per_gpu == 525_336_576
    assert LLAMA3.num_params == 8_030_261_248
    # K+V per token: 2 * 32 layers * 8 KV heads * 128 dims * 2 bytes = 131,072 B = 128 KiB.
    assert LLAMA3.kv_bytes_per_token == 131_072


def test_decode_batch_of_one_is_memory_bound():
    # One decode token: linear FLOPs 2 * 7.505e9 = 1.5e10 take 15 us at 989.4 TFLOP/s, but
    # the weights it multiplies, (6,979,321,856 + 525,336,576) * 2 B = 15,009,316,864 B,
    # take 15.009e9 / 3.35e12 = 4.4804 ms to stream from HBM. Attention over 1 token of KV
    # (131 KB) adds 39 ns. So the step is ~4.48 ms: weight bytes / bandwidth.
    t = ideal().step_time([(1, 0)])
    assert t == pytest.approx(15_009_316_864 / 3.35e12, rel=1e-3)
    # With the default 80% bandwidth efficiency and 1 ms + 10 us overhead: 5.6 + 1.01 ms.
    assert CostModel(LLAMA3, H100).step_time([(1, 0)]) == pytest.approx(
        4.4804e-3 / 0.8 + 1.01e-3, rel=1e-3)


def test_long_prefill_is_compute_bound():
    # 4096 prompt tokens at once: linear FLOPs 2*4096*6,979,321,856 + 2*525,336,576 (one
    # logits row) = 5.7177e13 -> 57.79 ms at 989.4 TFLOP/s (weights: only 4.48 ms).
    # Attention: 4 * 128 * 32 heads * 32 layers * (4096*4097/2) = 4.399e12 FLOPs ->
    # 4.446 ms, above its KV reads (131072 B * (128*32*31/2 + 4096) = 8.86 GB -> 2.64 ms).
    bd = ideal().step_breakdown([(4096, 0)])
    assert bd["linear"] == pytest.approx(5.7177e13 / 989.4e12, rel=1e-3)
    assert bd["attention"] == pytest.approx(4.3987e12 / 989.4e12, rel=1e-3)
    assert bd["total"] == pytest.approx(0.05779 + 0.004446, rel=2e-3)


def test_decode_iteration_32_by_4k():
    # Sarathi-Serve's yardstick. Weights 15.009 GB / (3.35 TB/s * 0.8) = 5.600 ms; KV
    # 32 * 4097 * 131072 B = 17.18 GB / 2.68 TB/s = 6.411 ms (memory bound: 8192 FLOPs per
    # 4096... the attention intensity 4*128*32*32/131072 = 4 FLOP/B is far below the ridge);
    # overhead 1 ms + 32 * 10 us. Total 13.33 ms; strict SLO 5x = 66.7 ms.
    cm = CostModel(LLAMA3, H100)
    assert cm.decode_step_time(32, 4096) == pytest.approx(
        5.6004e-3 + 32 * 4097 * 131072 / 2.68e12 + 1.32e-3, rel=1e-3)
    assert tbt_slo(cm) == pytest.approx(5 * cm.decode_step_time(32, 4096))
    assert tbt_slo(cm, 25) == pytest.approx(25 * cm.decode_step_time(32, 4096))


def test_tensor_parallel_shards_and_communicates():
    m70 = ModelSpec.llama2_70b(tensor_parallel_size=4)
    assert m70.num_params == pytest.approx(68.98e9, rel=1e-3)
    assert m70.weight_bytes_per_gpu == pytest.approx(m70.num_params * 2 / 4, rel=1e-3)
    assert m70.kv_heads_per_gpu == 2
    cm = ideal(m70)
    bd = cm.step_breakdown([(512, 0)])
    # 2 all-reduces per layer of 512 x 8192 bf16 values; ring: 2*(4-1)/4 of it per link.
    expect = 2 * 80 * 512 * 8192 * 2 * 1.5 / 450e9
    assert bd["communication"] == pytest.approx(expect, rel=1e-9)


def test_budget_from_profiling_is_the_largest_step_meeting_the_slo():
    cm = CostModel(LLAMA3, H100)
    slo = tbt_slo(cm)
    b = budget_from_profiling(cm, slo)

    def step(tokens):
        return cm.step_time([(1, 4096)] * 32 + [(tokens - 32, 4096)])

    assert step(b) <= slo < step(b + 1)


def test_chunking_overhead_by_hand():
    # Bare roofline, an 8192-token prompt in 64 chunks of 128. Each chunk's linear layers are
    # memory bound (2 * 128 * 6,979,321,856 FLOPs = 1.81 ms < 15.009 GB / 3.35 TB/s =
    # 4.480 ms), so the weights stream 64 times: 286.7 ms, against 1.1438e14 FLOPs =
    # 115.6 ms in one piece. Attention is compute bound in every chunk (per query tile:
    # 8.68 i + 4.38 us of FLOPs against 5.01 (i + 1) us of KV reads) but the first, and the
    # causal FLOPs sum to 4*128*32*32 * 8192*8193/2 = 1.7594e13 (17.78 ms) either way. The
    # first chunk reads 128 tokens of KV (5.01 us) instead of its 4.38 us of FLOPs.
    weights = 15_009_316_864 / 3.35e12
    whole_linear = (2 * 8192 * 6_979_321_856 + 2 * 525_336_576) / 989.4e12
    attention = 4 * 128 * 32 * 32 * (8192 * 8193 / 2) / 989.4e12
    first = 131_072 * 128 / 3.35e12 - 4 * 128 * 32 * 32 * (128 * 129 / 2) / 989.4e12
    r = chunking_overhead(ideal(), 8192, [128, 8192])
    assert r[0] == pytest.approx((64 * weights + attention + first) / (whole_linear + attention),
                                 rel=1e-9)
    assert r[0] == pytest.approx(2.283, abs=1e-3) and r[1] == 1.0


def test_chunking_overhead_grows_as_chunks_shrink():
    cm = CostModel(LLAMA3, H100)
    r = chunking_overhead(cm, 8192, [128, 512, 2048, 8192])
    assert r[-1] == pytest.approx(1.0)
    assert r[0] > r[1] > r[2] >= 1.0
    assert r[0] > 1.5  # 128-token chunks re-read 16 GB of weights 64 times


# ----------------------------------------------------------------------------- monotonicity

batches = st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 16384)), min_size=1,
                   max_size=40)
presets = st.sampled_from([("Llama-3-8B", "H100-SXM", None), ("Mistral-7B", "A100-80GB", None),
                           ("Llama-2-70B", "H200", 2)])


@settings(max_examples=150, deadline=None)
@given(batch=batches, preset=presets, i=st.integers(0, 39), dq=st.integers(1, 3000))
def test_step_time_monotone_in_tokens(batch, preset, i, dq):
    cm = CostModel.preset(*preset)
    i %= len(batch)
    more = list(batch)
    more[i] = (batch[i][0] + dq, batch[i][1])
    assert cm.step_time(more) >= cm.step_time(batch)
    assert cm.step_time([*batch, (1, 0)]) > cm.step_time(batch)  # one more request


@settings(max_examples=150, deadline=None)
@given(batch=batches, preset=presets, i=st.integers(0, 39), dc=st.integers(1, 20000))
def test_step_time_monotone_in_kv_length(batch, preset, i, dc):
    cm = CostModel.preset(*preset)
    i %= len(batch)
    deeper = list(batch)
    deeper[i] = (batch[i][0], batch[i][1] + dc)
    assert cm.step_time(deeper) > cm.step_time(batch)


# ----------------------------------------------------------------------------- same scheduler


def test_simulator_schedule_is_the_schedulers_own():
    """All requests at t=0: the simulator's per-step {request: tokens} equals run_trace's
    (the fake-model driver of the same Scheduler class), step for step."""
    rng = np.random.default_rng(3)
    lens = [(int(p), int(o)) for p, o in zip(rng.integers(1, 300, 12), rng.integers(1, 30, 12),
                                             strict=True)]
    sc = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512)
    cc = CacheConfig(block_size=16, num_blocks=40)  # tight: forces a preemption
    trace = run_trace([TraceRequest(f"r{i}", p, o) for i, (p, o) in enumerate(lens)], sc, cc)
    wl = [WorkloadRequest(f"r{i}", 0.0, p, o) for i, (p, o) in enumerate(lens)]
    res = simulate(wl, CostModel(LLAMA3, H100), sc, cc)
    assert type(res.engine.scheduler) is Scheduler
    got = [s.num_scheduled_tokens for s in res.step_log]
    assert got == [s.num_scheduled_tokens for s in trace]
    assert [list(d) for d in got] == [list(s.num_scheduled_tokens) for s in trace]  # order too
    assert any(s.preempted for s in trace)


def test_simulator_with_arrivals_matches_a_bare_scheduler_loop():
    """Poisson arrivals: a plain loop over a bare Scheduler, advancing a clock by the cost
    model's step time, schedules exactly what the simulator (engine + executor) does."""
    cm = CostModel(LLAMA3, H100)
    wl = sharegpt_like(40, 6.0, seed=5, max_model_len=4096)
    sc = SchedulerConfig.for_budget(512, max_model_len=4096, max_num_seqs=16)
    cc = CacheConfig(block_size=16, num_blocks=2000)
    res = simulate(wl, cm, sc, cc)

    from chunkprefill import Request

    sched, clock, i, steps = Scheduler(sc, cc), 0.0, 0, []
    pending = sorted(wl, key=lambda r: r.arrival_time)
    while i < len(pending) or sched.has_unfinished_requests():
        if not sched.has_unfinished_requests() and pending[i].arrival_time > clock:
            clock = pending[i].arrival_time
        while i < len(pending) and pending[i].arrival_time <= clock:
            r = pending[i]
            sched.add_request(Request(r.request_id, [0] * r.prompt_len, r.output_len))
            i += 1
        out = sched.schedule()
        batch = [(n, out.num_computed_tokens[rid]) for rid, n in out.num_scheduled_tokens.items()]
        sampled = {rid: 1 for rid in out.num_scheduled_tokens
                   if sched.requests[rid].num_owed_tokens == 0}
        sched.update_from_output(out, sampled)
        clock += cm.step_time(batch)
        steps.append((out.num_scheduled_tokens, clock, batch))
    assert [s.num_scheduled_tokens for s in res.step_log] == [s for s, _, _ in steps]
    assert res.step_log[-1].end_s == pytest.approx(steps[-1][1])
    # the batches rebuilt from the step log alone are the ones the scheduler ran
    assert batches_from_step_log(res.step_log) == [b for _, _, b in steps]
    assert any(c > 0 and n > 1 for b in steps for n, c in b[2])  # chunks beyond the first


def test_executor_follows_the_executor_protocol():
    cm = CostModel(LLAMA3, H100)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=4),
                      CacheConfig(block_size=16, num_blocks=10))
    from chunkprefill import Request

    sched.add_request(Request("a", [0] * 20, 2))
    sched.add_request(Request("b", [0] * 3, 2))
    out = sched.schedule()  # a: 16 tokens (mid-prefill), b: nothing left of the budget
    sampled, dt = CostModelExecutor(cm).execute(out, sched.requests)
    assert out.num_scheduled_tokens == {"a": 16}
    assert sampled == {} and dt == pytest.approx(cm.step_time([(16, 0)]))
    sched.update_from_output(out, sampled)
    out = sched.schedule()  # a: last 4 prompt tokens, b: its 3
    sampled, dt = CostModelExecutor(cm).execute(out, sched.requests)
    assert sampled == {"a": 1, "b": 1}
    assert dt == pytest.approx(cm.step_time([(4, 16), (3, 0)]))


# ----------------------------------------------------------------------------- course claims


@pytest.fixture(scope="module")
def llama_h100():
    return CostModel.preset("Llama-3-8B", "H100-SXM")


def test_prefill_first_stalls_decodes_more_than_chunked(llama_h100):
    cm = llama_h100
    wl = sharegpt_like(150, 4.0, seed=0)
    budget = budget_from_profiling(cm, tbt_slo(cm))
    chunked = simulate(wl, cm, SchedulerConfig.for_budget(budget, max_model_len=8192))
    pf = simulate(wl, cm, SchedulerConfig.for_budget(None, max_model_len=8192,
                                                     batching="prefill_first"))
    assert pf.p99_itl > 1.2 * chunked.p99_itl
    assert chunked.p99_itl <= tbt_slo(cm)  # the budget was chosen for it
    assert pf.summary["itl"]["max"] > 2 * chunked.summary["itl"]["max"]  # the stalls


def test_strict_slo_capacity_is_higher_with_chunking(llama_h100):
    cm = llama_h100
    slo = tbt_slo(cm)
    budget = budget_from_profiling(cm, slo)

    def wl(qps):
        return sharegpt_like(200, qps, seed=0)

    caps = {b: capacity_search(cm, SchedulerConfig.for_budget(
        None if b == "prefill_first" else budget, max_model_len=8192, batching=b), wl, slo,
        qps_lo=2.0, qps_hi=8.0, rel_tol=0.2) for b in ("mixed", "prefill_first")}
    assert caps["mixed"].qps > caps["prefill_first"].qps > 0
    for res in caps.values():  # the answer met the SLO; anything 10% higher did not
        assert any(ok and q == res.qps for q, _, _, ok in res.trials)
        assert all(not ok for q, _, _, ok in res.trials if q > res.qps * 1.1)


def test_capacity_search_brackets_the_answer_within_rel_tol(llama_h100):
    """The answer meets both SLOs and a QPS at most rel_tol above it does not, each
    re-simulated here; the search is deterministic (same trials twice)."""
    cm = llama_h100
    sc = SchedulerConfig.for_budget(2048, max_model_len=8192)
    slo = tbt_slo(cm) / 3  # tight enough that 20 requests fail somewhere in [1, 4] QPS

    def wl(q):
        return sharegpt_like(20, q, seed=1)

    def meets(q):
        r = simulate(wl(q), cm, sc)
        return r.p99_itl <= slo and r.median_scheduling_delay <= 2.0

    a = capacity_search(cm, sc, wl, slo, qps_lo=1, qps_hi=4, rel_tol=0.2)
    assert 1 <= a.qps < 4 and meets(a.qps)
    failed_above = [q for q, _, _, ok in a.trials if not ok and q > a.qps]
    assert failed_above and min(failed_above) <= a.qps * 1.2 and not meets(min(failed_above))
    b = capacity_search(cm, sc, wl, slo, qps_lo=1, qps_hi=4, rel_tol=0.2)
    assert a.trials == b.trials


# ----------------------------------------------------------------------------- calibration


@pytest.mark.parametrize("decode_attention", ["ragged", "padded"])
def test_fit_recovers_a_known_cost_model(decode_attention):
    """Durations generated by a known (CPU-like) cost model are fitted back to within 2%."""
    spec = ModelSpec.from_model_config(ModelConfig.small())
    truth = CostModel(spec, HardwareSpec("cpu", 50e9, 20e9, 1e10), linear_efficiency=1.0,
                      attention_efficiency=0.4, bandwidth_efficiency=1.0,
                      step_overhead_s=2e-3, per_seq_overhead_s=3e-4,
                      decode_attention=decode_attention)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(150):
        nd = int(rng.integers(0, 12))
        b = [(1, int(c)) for c in rng.integers(1, 800, nd)]
        if rng.random() < 0.6 or not b:
            b.append((int(rng.integers(2, 256)), int(rng.integers(0, 600))))
        batches.append(b)
    durations = [truth.step_time(b) for b in batches]
    cal = fit_cost_model(spec, batches, durations, decode_attention=decode_attention)
    assert cal.median_abs_error < 0.02
    held = [[(1, 300)] * 6 + [(128, 100)], [(1, 50)], [(200, 0)], [(1, 700)] * 10]
    for b in held:
        assert cal.cost_model.step_time(b) == pytest.approx(truth.step_time(b), rel=0.05)


def test_measure_and_fit_the_toy_model_end_to_end():
    """A few measured steps of the tiny toy model go through the whole calibration path
    (the real benchmark is benchmarks/sim_vs_measured.py)."""
    import torch

    from chunkprefill import ToyTransformer
    from chunkprefill.lab.calibrate_toy import measure_toy

    torch.manual_seed(0)
    model = ToyTransformer(ModelConfig.tiny(), seed=0)
    sc = SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=8, max_model_len=512)
    wl = make_workload(6, 50.0, LengthDist.uniform(5, 60), LengthDist.fixed(4), seed=0)
    res = measure_toy(model, wl, sc, clock="thread")
    assert all(len(o.output_token_ids) == 4 for o in res.outputs)
    assert res.p99_itl > 0 and res.median_ttft > 0
    cal = fit_cost_model(ModelSpec.from_model_config(model.config),
                         batches_from_step_log(res.step_log),
                         [s.duration_s for s in res.step_log])
    assert cal.cost_model.hardware.peak_flops > 0 and math.isfinite(cal.noise_sigma)
    pred = simulate(wl, cal.cost_model, sc, CacheConfig(16, 512))
    assert len(pred.outputs) == len(wl)


def test_the_simulator_imports_no_torch_even_when_it_runs():
    """Import the simulator, simulate, search capacity and fit a calibration in a fresh
    interpreter: neither torch nor matplotlib is ever imported."""
    code = """if True:
        import sys
        from chunkprefill.sim import (
            CostModel,
            capacity_search,
            fit_cost_model,
            simulate,
            tbt_slo,
        )
        from chunkprefill import SchedulerConfig
        from chunkprefill.workload import sharegpt_like
        cm = CostModel.preset("Llama-3-8B", "H100-SXM")
        res = simulate(sharegpt_like(20, 2.0, seed=0), cm)
        capacity_search(cm, SchedulerConfig.for_budget(512, max_model_len=8192),
                        lambda q: sharegpt_like(10, q, seed=0), tbt_slo(cm), max_trials=2)
        batches = [[(1, 100 * k)] * k for k in range(1, 9)]
        fit_cost_model(cm.model, batches, [cm.step_time(b) for b in batches],
                       decode_attention="ragged")
        assert len(res.outputs) == 20
        sys.exit(sorted(m for m in ("torch", "matplotlib") if m in sys.modules) or 0)
    """
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_simulator_module_mentions_torch_or_a_plotting_library():
    """Not even a lazy import inside a function: the simulator prices steps without tensors,
    so it uses none of the core's torch modules (the layer rule, tests/test_layers.py, keeps
    ``lab`` and ``course`` out of it)."""
    import ast
    from pathlib import Path

    import chunkprefill.sim

    for path in Path(chunkprefill.sim.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in ("torch", "matplotlib", "ipywidgets", "IPython"), (path, name)
                assert not name.startswith(("chunkprefill.executor", "chunkprefill.model",
                                            "chunkprefill.attention", "chunkprefill.kernels")
                                           ), (path, name)


# ----------------------------------------------------------------------------- workloads


def test_workload_is_seeded_and_qps_only_rescales_arrivals():
    a = make_workload(50, 2.0, LengthDist.lognormal(100, p90=300), LengthDist.uniform(1, 9), 7)
    b = make_workload(50, 2.0, LengthDist.lognormal(100, p90=300), LengthDist.uniform(1, 9), 7)
    c = make_workload(50, 4.0, LengthDist.lognormal(100, p90=300), LengthDist.uniform(1, 9), 7)
    assert a == b
    assert [(r.prompt_len, r.output_len) for r in a] == [(r.prompt_len, r.output_len) for r in c]
    assert [r.arrival_time / 2 for r in a] == pytest.approx([r.arrival_time for r in c])


def test_lognormal_matches_its_median_and_p90():
    x = LengthDist.lognormal(1730, p90=5696).sample(np.random.default_rng(0), 200_000)
    assert np.median(x) == pytest.approx(1730, rel=0.02)
    assert np.percentile(x, 90) == pytest.approx(5696, rel=0.03)
    gaps = np.diff(poisson_arrivals(100_000, 5.0, seed=0))
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)


def test_sharegpt_like_fits_the_context():
    wl = sharegpt_like(500, 1.0, seed=0, max_model_len=4096)
    assert all(r.prompt_len + r.output_len < 4096 and r.prompt_len >= 1 for r in wl)


# ----------------------------------------------------------------------------- bad input

BAD = [
    ("qps zero", lambda: poisson_arrivals(10, 0.0), "qps"),
    ("qps negative", lambda: make_workload(10, -1.0, LengthDist.fixed(5), LengthDist.fixed(5)),
     "qps"),
    ("no requests", lambda: poisson_arrivals(0, 1.0), "num_requests"),
    ("length zero", lambda: LengthDist.fixed(0), "length"),
    ("uniform reversed", lambda: LengthDist.uniform(10, 2), "hi must be >= lo"),
    ("median negative", lambda: LengthDist.lognormal(-5, p90=10), "median"),
    ("p90 below median", lambda: LengthDist.lognormal(100, p90=50), "p90"),
    ("peak flops zero", lambda: HardwareSpec("x", 0.0, 1e12, 1e10), "peak_flops"),
    ("bandwidth negative", lambda: HardwareSpec("x", 1e12, -1.0, 1e10), "mem_bandwidth"),
    ("efficiency above 1", lambda: CostModel(LLAMA3, H100, linear_efficiency=1.5),
     r"linear_efficiency must be a finite number in \(0, 1\]"),
    ("efficiency zero", lambda: CostModel(LLAMA3, H100, bandwidth_efficiency=0.0),
     "bandwidth_efficiency"),
    ("overhead negative", lambda: CostModel(LLAMA3, H100, step_overhead_s=-1e-3),
     "step_overhead_s"),
    ("70B on one A100", lambda: CostModel(ModelSpec.llama2_70b(1), HardwareSpec.a100_80gb()),
     r"does not fit A100-80GB.*tensor_parallel_size >= 2"),
    ("70B TP2 on 80 GB with 0.5 util",
     lambda: CostModel(ModelSpec.llama2_70b(2), H100, gpu_memory_utilization=0.5),
     r"tensor_parallel_size >= 4"),
    ("TP not dividing heads", lambda: ModelSpec.llama3_8b(tensor_parallel_size=3),
     "tensor_parallel_size"),
    ("unknown preset", lambda: CostModel.preset("GPT-5", "H100-SXM"), "model must be one of"),
    ("unknown hardware", lambda: HardwareSpec.preset("TPU"), "hardware must be one of"),
    ("empty batch", lambda: CostModel(LLAMA3, H100).step_time([]), "batch is empty"),
    ("zero-token request", lambda: CostModel(LLAMA3, H100).step_time([(0, 5)]), "query_len"),
    ("negative context", lambda: CostModel(LLAMA3, H100).step_time([(1, -1)]), "context_len"),
    ("slo below one decode step",
     lambda: budget_from_profiling(CostModel(LLAMA3, H100), 1e-3), "slo_s"),
    ("slo zero", lambda: tbt_slo(CostModel(LLAMA3, H100), 0.0), "factor"),
    ("capacity slo too small",
     lambda: capacity_search(CostModel(LLAMA3, H100), SchedulerConfig(), lambda q: [], 1e-4),
     r"slo_s .* below one decode step"),
    ("capacity qps bracket", lambda: capacity_search(
        CostModel(LLAMA3, H100), SchedulerConfig(), lambda q: [], 0.1, qps_lo=4, qps_hi=2),
     "qps_hi"),
    ("capacity qps zero", lambda: capacity_search(
        CostModel(LLAMA3, H100), SchedulerConfig(), lambda q: [], 0.1, qps_lo=0), "qps_lo"),
    ("empty workload", lambda: simulate([], CostModel(LLAMA3, H100)), "workload is empty"),
    ("negative noise", lambda: CostModelExecutor(CostModel(LLAMA3, H100), noise_sigma=-0.1),
     "noise_sigma"),
    ("unknown batching", lambda: SchedulerConfig.for_budget(512, max_model_len=4096,
                                                             batching="fastest"), "batching"),
    ("budget not an int", lambda: SchedulerConfig.for_budget(51.2, max_model_len=4096), "budget"),
    ("fit too few steps", lambda: fit_cost_model(LLAMA3, [[(1, 0)]], [1e-3]), "at least 5"),
    ("fit bad durations",
     lambda: fit_cost_model(LLAMA3, [[(1, 0)]] * 5, [1e-3, 1e-3, 0.0, 1e-3, 1e-3]), "> 0"),
]


@pytest.mark.parametrize("case,make,match", BAD, ids=[c[0] for c in BAD])
def test_bad_input_raises_a_clear_value_error(case, make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_run_workload_on_an_idle_engine_jumps_to_arrivals():
    from chunkprefill.engine import LLMEngine

    cm = CostModel(LLAMA3, H100)
    eng = LLMEngine(CostModelExecutor(cm), SchedulerConfig(), CacheConfig(16, 1000))
    wl = [WorkloadRequest("late", 100.0, 10, 2), WorkloadRequest("early", 5.0, 10, 2)]
    outs = run_workload(eng, wl)
    assert [o.request_id for o in outs] == ["early", "late"]
    first = outs[1].metrics
    assert first.arrival_time == 100.0
    assert first.ttft == pytest.approx(cm.step_time([(10, 0)]))


# ----------------------------------------------------------------------------- plots


def test_sim_plots_return_figures_and_leave_pyplot_alone(llama_h100):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from chunkprefill.course.plots import simulated as sim_plots
    from chunkprefill.sim import compare_batching, sweep_budgets

    cm, slo = llama_h100, tbt_slo(llama_h100)
    wl = sharegpt_like(30, 4.0, seed=0)
    results = compare_batching(wl, cm, 512)
    assert list(results) == ["mixed (budget 512)", "prefill_first"]
    assert results["prefill_first"].p99_itl > results["mixed (budget 512)"].p99_itl
    before = plt.get_fignums()
    figs = [sim_plots.plot_step_time_vs_tokens(cm, 4096),
            sim_plots.plot_budget_sweep(sweep_budgets(cm, [256, 1024], wl), slo),
            sim_plots.plot_chunking_overhead(cm, 4096, [256, 4096]),
            sim_plots.plot_tbt_timeline(results, slo),
            sim_plots.plot_capacity({"strict": {"mixed": 3.0, "prefill_first": 1.5}}),
            sim_plots.plot_simulation(results, cm, slo, "30 requests")]
    assert plt.get_fignums() == before
    for fig in figs:
        assert isinstance(fig, Figure)
        assert any("SIMULATED" in ax.get_title() for ax in fig.axes)
    # the timeline draws one panel per policy, each step with work as one point
    lines = [ax.get_lines()[0] for ax in figs[3].axes]
    assert [len(ln.get_xdata()) for ln in lines] == [
        sum(1 for s in r.step_log if s.num_scheduled_tokens) for r in results.values()]


def test_sim_plots_hide_no_line_and_keep_one_colour_per_policy(llama_h100):
    """Readers without a kernel see the stored figures: no policy's step-time line lies under
    another's (one panel each), and a policy has the same colour in every plot, whatever
    the order of the results."""
    import matplotlib.colors as mcolors

    from chunkprefill.course.plots import simulated as sim_plots
    from chunkprefill.sim import compare_batching

    results = compare_batching(sharegpt_like(30, 4.0, seed=0), llama_h100, 512)
    flipped = dict(reversed(list(results.items())))
    for res in (results, flipped):
        timeline = sim_plots.plot_tbt_timeline(res, 0.05)
        assert len(timeline.axes) == len(res)
        for ax, label in zip(timeline.axes, res, strict=True):
            (line, *_) = ax.get_lines()
            assert line.get_label().startswith(label)
            assert mcolors.same_color(line.get_color(), sim_plots.batching_color(label))
        view = sim_plots.plot_simulation(res, llama_h100, 0.05)
        cdf = view.axes[-1]
        assert [mcolors.to_hex(ln.get_color()) for ln in cdf.get_lines()[:2]] == [
            mcolors.to_hex(sim_plots.batching_color(label)) for label in res]
    assert not mcolors.same_color(sim_plots.batching_color("mixed (budget 512)"),
                                  sim_plots.batching_color("prefill_first"))
    bars = sim_plots.plot_capacity({"strict": {"prefill_first": 1.5, "mixed": 3.0}}).axes[0]
    assert mcolors.same_color(bars.patches[0].get_facecolor(),
                              sim_plots.batching_color("prefill_first"))


def test_sim_plots_keep_annotations_and_baselines_inside_the_axes(llama_h100):
    """No clipped annotation, no baseline drawn on the frame: the knee's note sits inside the
    axes, and prefill-first's level lies inside the y range of the sweep panels."""
    from chunkprefill.course.plots import simulated as sim_plots
    from chunkprefill.sim import sweep_budgets

    ax = sim_plots.plot_step_time_vs_tokens(llama_h100, 8192).axes[0]
    (note,) = ax.texts
    assert note.get_transform() == ax.get_xaxis_transform() and 0 < note.get_position()[1] < 1
    rows = sweep_budgets(llama_h100, [256, 1024], sharegpt_like(30, 4.0, seed=0))
    fig = sim_plots.plot_budget_sweep(rows)
    pf = [r for r in rows if r["batching"] == "prefill_first"]
    for ax, key in zip(fig.axes, ("p99_itl_s", "median_ttft_s"), strict=True):
        lo, hi = ax.get_ylim()
        assert all(lo < r[key] * 1e3 < hi for r in pf)

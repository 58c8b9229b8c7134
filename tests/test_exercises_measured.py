"""The measured notebooks' exercises (01, 06, 07): every reference answer passes its checker,
a wrong one gets "Not yet". Reference answers are worked by hand from the scheduler's rules
(see each comment); the measured ones run on the tiny model with small workloads, and their
checkers test the method and an inequality the physics guarantees, never a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.course.exercises import (
    cost_model as nb08,
)
from chunkprefill.course.exercises import (
    gpu_timing as nb07,
)
from chunkprefill.course.exercises import (
    stall as nb01,
)
from chunkprefill.course.exercises import (
    tradeoffs as nb06,
)
from chunkprefill.lab.stall import StallWorkload, compare_stall
from chunkprefill.lab.stats import interleaved, median_ci
from chunkprefill.lab.step_cost import chunking_overhead, time_prefill_step


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return ToyTransformer(ModelConfig.small(), seed=0)


def right(msg: str) -> bool:
    return msg.startswith("Right")


def not_yet(msg: str) -> bool:
    return msg.startswith("Not yet") and "Hint:" in msg


# -- 01 ---------------------------------------------------------------------------------------

def test_01_chunks():
    # 48 decodes take 48 of 288 tokens; 240 left; ceil(2048 / 240) = 9 chunks.
    assert right(nb01.check_chunks((240, 9)))
    assert not_yet(nb01.check_chunks((256, 8))) and not_yet(nb01.check_chunks(None))


def test_01_second_variable():
    assert right(nb01.check_second_variable({"max_num_seqs"}))
    assert not_yet(nb01.check_second_variable(set())) and not_yet(
        nb01.check_second_variable(None))


def test_01_clock():
    # a sleeping thread uses no CPU time; the wall clock counts the sleep
    assert right(nb01.check_clock("thread"))
    assert not_yet(nb01.check_clock("wall")) and not_yet(nb01.check_clock(None))
    assert not_yet(nb01.check_clock("sundial"))


def test_01_measure(model):
    samples = interleaved({
        "32 decodes": lambda: time_prefill_step(model, 1, num_decodes=31, decode_kv_len=64,
                                                iters=1),
        "32 decodes + 512": lambda: time_prefill_step(model, 512, num_decodes=32,
                                                      decode_kv_len=64, iters=1)}, repeats=5)
    estimates = {k: median_ci(v) for k, v in samples.items()}
    assert right(nb01.check_measure(samples, estimates))
    same = {"a": samples["32 decodes"], "b": samples["32 decodes"]}  # the same step twice
    assert not_yet(nb01.check_measure(same, {k: median_ci(v) for k, v in same.items()}))
    assert not_yet(nb01.check_measure(None, None))
    three = {k: v[:3] for k, v in samples.items()}
    assert not_yet(nb01.check_measure(three, {k: median_ci(v) for k, v in three.items()}))


# -- 06 ---------------------------------------------------------------------------------------

def test_06_chunks():
    # 100 - 32 decodes = 68 a step; ceil(1024 / 68) = 16 chunks
    assert right(nb06.check_chunks((68, 16)))
    assert not_yet(nb06.check_chunks((100, 11)))


def test_06_threshold():
    # 0: 512 + 512, then 512 -> 2 steps; 128: 3 x 128 a step, 512 / 128 = 4 steps
    assert right(nb06.check_threshold((2, 4)))
    assert not_yet(nb06.check_threshold((2, 2)))


def test_06_bug():
    # broken: max_num_seqs = 128 // 8 = 16; correct: 32 decodes + the long prompt = 33
    assert right(nb06.check_bug((16, 33)))
    assert not_yet(nb06.check_bug((33, 33)))


def test_06_measure(model):
    wl = StallWorkload(num_decodes=8, decode_prompt_len=16, decode_output_len=24,
                       long_prompt_len=256, long_output_len=2, long_arrival_steps=(2,))
    cmp = compare_stall(model, wl, {b: SchedulerConfig.for_budget(b, max_model_len=512)
                                    for b in (40, 136)}, repeats=3)
    assert right(nb06.check_measure(cmp))
    assert not_yet(nb06.check_measure(None))
    close = compare_stall(model, wl, {b: SchedulerConfig.for_budget(b, max_model_len=512)
                                      for b in (104, 136)}, repeats=1)
    assert not_yet(nb06.check_measure(close))  # 3 chunks vs 2: not a controlled 4x, 1 repeat


# -- 07 ---------------------------------------------------------------------------------------

def test_07_reread():
    # 0 + 256 + 512 + 768 = 1536; 128 x (0 + 1 + ... + 7) = 3584
    assert right(nb07.check_reread((1536, 3584)))
    assert not_yet(nb07.check_reread((0, 0)))


def test_07_predict_and_bug():
    tokens = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    medians = [1e-3 + 1e-5 * n + 2e-9 * n * n for n in tokens]  # a line with a little curvature
    fixed, per = nb07.fit_step_time(tokens, medians)
    assert right(nb07.check_predict(tokens, medians, (fixed + per * 1056) / (fixed + per * 32)))
    assert not_yet(nb07.check_predict(tokens, medians, 1056 / 32))
    # absolute least squares lets the 1,024-token step pull the line: the 1-token step is the
    # one it misses most, relative to its size
    assert right(nb07.check_bug(tokens, medians, 1))
    assert not_yet(nb07.check_bug(tokens, medians, 1024))


def test_07_measure(model):
    ov = chunking_overhead(model, 512, [32, 256], repeats=3)
    assert right(nb07.check_measure(ov))
    assert not_yet(nb07.check_measure({32: ov[32]}))
    assert not_yet(nb07.check_measure({32: median_ci([0.9, 0.95, 0.97]),
                                          256: median_ci([1.0, 1.0, 1.0])}))
    assert np.isfinite(ov[256].median)


# -- 08 (simulated: deterministic) --------------------------------------------------------------

def test_08_decode_linear():
    # one decode token is memory bound: streamed weight bytes / (bandwidth x efficiency)
    cm = nb08.CostModel.preset("Llama-3-8B", "H100-SXM")
    by_hand = cm.model.linear_bytes_per_step / (cm.hardware.mem_bandwidth
                                                * cm.bandwidth_efficiency) * 1e3
    assert right(nb08.check_decode_linear(by_hand))
    flops_bound = 2 * cm.model.linear_bytes_per_step / cm.model.bytes_per_param \
        / cm.hardware.peak_flops * 1e3  # the compute time: far too small for one token
    assert not_yet(nb08.check_decode_linear(flops_bound))
    assert not_yet(nb08.check_decode_linear(None))


def test_08_load():
    # the stored notebook prints P99 TBT per load; the answer is the first load of LOADS whose
    # prefill-first P99 TBT exceeds tbt_slo, checked here independently of the checker's loop
    cm = nb08.CostModel.preset("Llama-3-8B", "H100-SXM")
    slo = nb08.tbt_slo(cm)
    first = next(q for q in nb08.LOADS if nb08.compare_batching(
        nb08.sharegpt_like(200, q, seed=0, max_model_len=cm.model.max_model_len), cm,
        2048)["prefill_first"].p99_itl > slo)
    assert right(nb08.check_load(first))
    assert not_yet(nb08.check_load(nb08.LOADS[0] if first != nb08.LOADS[0] else 6.0))
    assert not_yet(nb08.check_load(None))


def test_08_bug():
    # the broken price forgets the re-read of earlier chunks' KV: it even says chunking is
    # cheaper than one piece, which the same work cannot be
    cm = nb08.CostModel.preset("Llama-3-8B", "H100-SXM")
    broken = nb08.broken_chunking_overhead(cm, 8192, 512)
    with_kv = sum(cm.step_time([(512, 512 * k)]) for k in range(16)) / cm.step_time([(8192, 0)])
    assert broken < 1.0 < with_kv
    assert right(nb08.check_bug(100 * (with_kv - broken)))
    assert not_yet(nb08.check_bug(0.0))

"""Workloads from the real ShareGPT trace: seeded, every request a real (prompt, output) pair
of the shipped file, arrivals independent of the lengths."""

from __future__ import annotations

import numpy as np
import pytest

from chunkprefill.data import sharegpt_lengths
from chunkprefill.workload import WORKLOADS, named_workload, poisson_arrivals, sharegpt


def test_sharegpt_is_deterministic_in_its_seed():
    assert sharegpt(300, 2.0, seed=4) == sharegpt(300, 2.0, seed=4)
    assert sharegpt(300, 2.0, seed=4) != sharegpt(300, 2.0, seed=5)


def test_sharegpt_requests_are_rows_of_the_file():
    prompt, output = sharegpt_lengths()
    rows = set(zip(prompt.tolist(), output.tolist()))
    wl = sharegpt(2000, 3.0, seed=0)  # the file's own cap is 8K: nothing clipped at 8192
    assert all((r.prompt_len, r.output_len) in rows for r in wl)
    assert len({(r.prompt_len, r.output_len) for r in wl}) > 1500  # not one row repeated
    # 2000 draws: the sample median lands near the trace's 1730 (its P45-P55 band).
    lo, hi = np.percentile(prompt, [45, 55])
    assert lo <= np.median([r.prompt_len for r in wl]) <= hi


def test_sharegpt_arrivals_are_poisson_and_lengths_ignore_qps():
    a, b = sharegpt(100, 1.0, seed=2), sharegpt(100, 4.0, seed=2)
    assert [r.arrival_time for r in a] == pytest.approx(poisson_arrivals(100, 1.0, 2))
    assert [(r.prompt_len, r.output_len) for r in a] == [(r.prompt_len, r.output_len)
                                                         for r in b]


def test_sharegpt_fits_a_shorter_context():
    wl = sharegpt(3000, 2.0, seed=1, max_model_len=2048)
    assert max(r.prompt_len + r.output_len for r in wl) < 2048
    assert min(r.prompt_len for r in wl) >= 1


def test_named_workloads():
    assert set(WORKLOADS) == {"sharegpt", "sharegpt_like", "arxiv_like"}
    assert named_workload("sharegpt", 10, 1.0, seed=3) == sharegpt(10, 1.0, seed=3)
    with pytest.raises(ValueError, match="workload must be one of"):
        named_workload("lmsys", 10, 1.0)
    with pytest.raises(ValueError, match="num_requests must be an integer >= 1"):
        sharegpt(0, 1.0)

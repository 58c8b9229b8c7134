"""The GPU scripts on a CPU: ``make gpu`` says there is no GPU and exits 0 at once; the sweep
runs its bfloat16 path on the torch backend (it used to raise 'dtypes must match'); the kernel
benchmark's smoke run writes its results, naming the versions it ran with."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_gpu  # noqa: E402


def _run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, make gpu runs for real")
def test_make_gpu_on_a_cpu_says_so_and_exits_0_at_once() -> None:
    t0 = time.perf_counter()
    out = _run(["benchmarks/run_gpu.py"])
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 and "nothing to run" in out.stdout
    assert time.perf_counter() - t0 < 20  # no tests, no benchmarks ran


def test_make_gpu_finds_the_gpu_notebooks_by_topic() -> None:
    """Whatever their numbers (05/07 today, 06/08 after the course's renumbering)."""
    found = run_gpu.notebooks(list(run_gpu.DEFAULT_NOTEBOOKS))
    assert len(found) == 2 and all(p.exists() for p in found)
    assert found[0].name.endswith("_the_attention_kernel.ipynb")
    assert found[1].name.endswith("_live_gpu_timing.ipynb")
    with pytest.raises(SystemExit, match="no notebook matches"):
        run_gpu.notebooks(["notebooks/*_no_such_topic.ipynb"])


def test_a_step_past_its_budget_is_stopped_and_reported(tmp_path: Path) -> None:
    step = run_gpu.run_step("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"],
                            tmp_path / "logs" / "sleep.log", timeout=10)
    assert step["status"].startswith("timed out") and step["seconds"] < 30
    assert run_gpu.run_step("late", [sys.executable, "-c", "pass"], tmp_path / "logs" / "x.log",
                            timeout=3)["status"] == "no time left"


def test_gpu_sweep_runs_bfloat16_on_the_cpu(tmp_path: Path) -> None:
    out = _run(["benchmarks/gpu_sweep.py", str(tmp_path), "--smoke", "--dtype", "bfloat16"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["dtype"] == "torch.bfloat16" and env["torch"] == torch.__version__
    assert "triton" in env and "cuda" in env
    for name in ("step_time", "chunking_overhead", "tile_effect", "tradeoff"):
        assert len((tmp_path / f"{name}.csv").read_text().splitlines()) >= 3


def test_gpu_kernels_smoke_writes_its_results(tmp_path: Path) -> None:
    out = _run(["benchmarks/gpu_kernels.py", "--cpu-smoke", "--out", str(tmp_path)])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_kernels.json").read_text())
    assert results["correct"] and results["environment"]["torch"] == torch.__version__
    assert {r["dtype"] for r in results["correctness"]} == {"torch.float32", "torch.bfloat16"}
    assert all(r["triton_ms"] > 0 for r in results["timing"])

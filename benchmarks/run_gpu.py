"""``make gpu``: the GPU half of the project in one command, in at most 10 minutes.

On a machine with a CUDA GPU it runs, each in its own process and time budget:

1. the GPU tests (``tests/test_gpu.py``, and ``tests/test_kernels.py`` / ``test_dtypes.py``,
   which run the compiled kernels against the reference there);
2. ``benchmarks/gpu_kernels.py`` (kernel correctness and timing);
3. ``benchmarks/gpu_sweep.py`` (step time vs tokens, chunking overhead, the trade-off);
4. the GPU notebooks, executed in place (default: whatever
   ``notebooks/*_the_attention_kernel.ipynb`` and ``notebooks/*_live_gpu_timing.ipynb`` match,
   so the course's numbering can change).

Everything lands under ``--out`` (default ``artifacts/gpu/``): each step's log and results,
``environment.json`` (device, torch, Triton, CUDA) and ``summary.json``; ``--tar FILE`` also
packs it into one archive. Exit status 1 if any step failed or ran out of time. On a machine
without a CUDA GPU it says so in one line and exits 0.

Run: python benchmarks/run_gpu.py [--out DIR] [--budget-s 600] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NOTEBOOKS = ("notebooks/*_the_attention_kernel.ipynb",
                     "notebooks/*_live_gpu_timing.ipynb")
GPU_TESTS = ("tests/test_gpu.py", "tests/test_kernels.py", "tests/test_dtypes.py")
# Each step's share of the budget (seconds, capped by what is left); the notebooks get the rest.
CAPS = {"tests": 180, "gpu_kernels": 90, "gpu_sweep": 180}


def no_gpu_reason() -> str | None:
    """None if torch sees a CUDA GPU, else why not (one line)."""
    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return "no NVIDIA GPU on this machine (no driver, no nvidia-smi)"
    try:
        import torch
    except ImportError:
        return "torch is not installed for this Python"
    if torch.cuda.is_available():
        return None
    return (f"an NVIDIA driver is here but torch {torch.__version__} sees no CUDA device "
            "(a CPU-only torch build?)")


def notebooks(patterns: list[str]) -> list[Path]:
    paths: list[Path] = []
    for pattern in patterns:
        found = sorted(glob.glob(str(ROOT / pattern))) or ([pattern] if Path(pattern).exists()
                                                           else [])
        if not found:
            raise SystemExit(f"no notebook matches {pattern!r}")
        paths += [Path(p) for p in found]
    return paths


def run_step(name: str, cmd: list[str], log: Path, timeout: float) -> dict[str, object]:
    """Run ``cmd`` from the repo root with the kernels compiled (no interpreter), logging to
    ``log``; returns the step's summary."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    env.setdefault("PYTHONUNBUFFERED", "1")
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if timeout < 10:
        status, rc = "no time left", None
    else:
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            try:
                rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
                status = "ok" if rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                status, rc = f"timed out after {timeout:.0f} s", None
    seconds = time.perf_counter() - t0
    print(f"  {name:28s} {status:24s} {seconds:6.0f} s   log: {log.relative_to(log.parents[1])}",
          flush=True)
    return {"step": name, "status": status, "returncode": rc, "seconds": round(seconds, 1),
            "log": str(log)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", default=list(DEFAULT_NOTEBOOKS),
                    help="notebook paths or globs, relative to the repo root")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "gpu")
    ap.add_argument("--budget-s", type=float, default=600.0, help="all steps together")
    ap.add_argument("--tar", type=Path, help="also pack --out into this .tar.gz")
    a = ap.parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"make gpu: {reason}: nothing to run here (the CPU checks are 'make test').")
        return 0 if "driver is here" not in reason else 1
    sys.path.insert(0, str(ROOT))  # also when run by a Python that has not installed the package
    from chunkprefill.gpu import describe, environment

    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment("cuda")
    (out / "environment.json").write_text(json.dumps(env, indent=1))
    print(f"make gpu: {describe(env)}; results in {out}", flush=True)
    deadline = time.perf_counter() + a.budget_s
    nbs = notebooks(a.notebooks)
    py = sys.executable

    def left(cap: float = float("inf")) -> float:
        return min(cap, deadline - time.perf_counter())

    steps = [
        run_step("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *GPU_TESTS,
                           f"--junitxml={out / 'tests' / 'junit.xml'}"],
                 out / "tests" / "pytest.log", left(CAPS["tests"])),
        run_step("gpu_kernels", [py, "benchmarks/gpu_kernels.py", "--out", str(out / "kernels")],
                 out / "kernels" / "gpu_kernels.log", left(CAPS["gpu_kernels"])),
        run_step("gpu_sweep", [py, "benchmarks/gpu_sweep.py", str(out / "sweep")],
                 out / "sweep" / "gpu_sweep.log", left(CAPS["gpu_sweep"])),
    ]
    for i, nb in enumerate(nbs):
        share = left() / (len(nbs) - i)
        steps.append(run_step(
            f"notebook {nb.name}",
            [py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
             f"--ExecutePreprocessor.timeout={int(max(share, 10))}", str(nb)],
            out / "notebooks" / f"{nb.stem}.log", share))
        if steps[-1]["status"] == "ok":
            shutil.copy(nb, out / "notebooks" / nb.name)
    (out / "summary.json").write_text(json.dumps({"environment": env, "steps": steps},
                                                 indent=1))
    if a.tar is not None:
        with tarfile.open(a.tar, "w:gz") as tar:
            tar.add(out, arcname=out.name)
        print(f"packed {a.tar}")
    failed = [s["step"] for s in steps if s["status"] != "ok"]
    print(f"make gpu: {len(steps) - len(failed)} of {len(steps)} steps ok"
          + (f"; not ok: {', '.join(map(str, failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

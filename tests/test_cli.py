from __future__ import annotations

import json
import subprocess
import sys


def cli(*args):
    return subprocess.run([sys.executable, "-m", "chunkprefill", *args],
                          capture_output=True, text=True)


def test_trace_prints_the_seed_table():
    res = cli("trace", "--budget", "16", "--decodes", "6", "--prompt", "40")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["step", "D1", "D2", "D3", "D4", "D5", "D6", "P", "used", "left"]
    for k in range(2, 6):  # P gets the 10 tokens the six decodes leave, four times
        assert lines[1 + k].split() == [str(k)] + ["1"] * 6 + ["10", "16", "0"]


def test_trace_json():
    res = cli("trace", "--json", "--steps", "7")
    steps = json.loads(res.stdout)
    assert steps[2] == {**{f"D{i}": 1 for i in range(1, 7)}, "P": 10}
    assert list(steps[2]) == [f"D{i}" for i in range(1, 7)] + ["P"]
    assert steps[6]["P"] == 1


def test_bad_flags_one_line_error_exit_2():
    for args in (["--budget", "0"], ["--budget", "x"], ["--no-chunking"],
                 ["--threshold", "-1"], ["--budget", "16", "--max-num-seqs", "32"]):
        res = cli("trace", *args)
        assert res.returncode == 2, args
        assert "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "error:" in res.stderr, res.stderr

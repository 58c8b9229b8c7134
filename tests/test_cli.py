from __future__ import annotations

import json
import subprocess
import sys

import pytest


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


def test_bad_knob_flags_name_the_flag():
    for args, flag in ((["--policy", "prefill_first"], "--policy"),
                       (["--batching", "fcfs"], "--batching"),
                       (["--watermark", "1.0"], "--watermark"),
                       (["--watermark", "lots"], "--watermark"),
                       (["--prefill-schedule-interval", "0"], "--prefill-schedule-interval"),
                       (["--batching", "prefill_or_decode", "--prefill-schedule-interval", "2"],
                        "--prefill-schedule-interval"),
                       (["--max-num-active-seqs", "0"], "--max-num-active-seqs"),
                       (["--max-num-seqs", "4", "--max-num-active-seqs", "5"],
                        "--max-num-active-seqs"),
                       (["--prompt-priority", "high"], "--prompt-priority"),
                       (["--batching", "prefill_first"], "--budget")):
        res = cli("trace", *args)
        assert res.returncode == 2, args
        assert len(res.stderr.strip().splitlines()) == 1 and flag in res.stderr, res.stderr


def test_knob_flags_change_the_schedule():
    decodes = {f"D{i}": 1 for i in range(1, 7)}
    # vLLM 0.33.0's recorded interval2_article_trace: P's chunks every other step
    steps = json.loads(cli("trace", "--json", "--steps", "6",
                           "--prefill-schedule-interval", "2").stdout)
    assert steps[2:6] == [{**decodes, "P": 10}, decodes, {**decodes, "P": 10}, decodes]
    # SGLang-style: P's 40 tokens alone in budget-sized chunks, decodes stalled meanwhile
    steps = json.loads(cli("trace", "--json", "--steps", "6",
                           "--batching", "prefill_or_decode").stdout)
    assert steps[2:6] == [{"P": 16}, {"P": 16}, {"P": 8}, {**decodes, "P": 1}]
    # one seat, P more urgent than the decodes still waiting: P is admitted before D2..D6
    steps = json.loads(cli("trace", "--json", "--max-num-seqs", "1", "--decode-len", "2",
                           "--arrival-step", "0", "--policy", "priority",
                           "--prompt-priority", "-1").stdout)
    assert steps[0] == {"P": 16}
    res = cli("trace", "--help")
    for flag in ("--policy", "--batching", "--long-prefill-token-threshold-adaptive",
                 "--prefill-schedule-interval", "--max-num-active-seqs", "--watermark",
                 "--scheduler-reserve-full-isl"):
        assert flag in res.stdout


def test_trace_shared_prefix():
    # Worked by hand: S (P's first 32 tokens) shares the 10 tokens the decodes leave, so it
    # runs 10, 10, 10, 2; P arrives at step 2 with no budget left; at step 3 S's last chunk
    # fills its second 16-token block, which is cached at once, so P finds 32 tokens and
    # computes its last 8 in the 8 tokens S leaves.
    res = cli("trace", "--shared-prefix", "32", "--steps", "5")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["step", *[f"D{i}" for i in range(1, 7)], "S", "P", "used",
                                "left"]
    assert [ln.split()[7:9] for ln in lines[1:5]] == [["10", "-"], ["10", "-"], ["10", "-"],
                                                      ["2", "8"]]
    assert lines[-1] == "step 3: P admitted with 32 tokens from the prefix cache"
    bad = cli("trace", "--shared-prefix", "41")
    assert bad.returncode == 2 and "prefix_len must be an integer in [1, 40]" in bad.stderr


def test_prefill_time_prints_chunks_and_total():
    res = cli("prefill-time", "--model", "yi-34b", "--tp", "2", "--hardware", "a100-80gb-pcie",
              "--prompt-len", "1000", "--chunk-size", "300")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "calibrated on sarathi-serve" in lines[0]
    rows = [ln.split() for ln in lines[2:-1]]
    # 1000 tokens in chunks of at most 300: 300, 300, 300, 100 at depths 0, 300, 600, 900.
    assert [(int(r[1]), int(r[2])) for r in rows] == [(300, 0), (300, 300), (300, 600),
                                                      (100, 900)]
    assert lines[-1].startswith("prefill_ms=")
    total = float(lines[-1].split("=")[1])
    assert total == pytest.approx(sum(float(r[3]) for r in rows), abs=0.01)


def test_prefill_time_unchunked_is_one_step_and_cheaper():
    def total(chunk: str) -> float:
        res = cli("prefill-time", "--model", "Yi-34B", "--hardware", "A100-80GB-PCIe",
                  "--prompt-len", "4096", "--chunk-size", chunk)
        assert res.returncode == 0, res.stderr
        return float(res.stdout.splitlines()[-1].split("=")[1]), len(res.stdout.splitlines())

    whole, n_lines = total("4096")
    assert n_lines == 4 and total("100000")[0] == whole  # header, column names, 1 chunk, total
    assert total("512")[0] > whole  # 8 chunks: weights streamed 8 times, KV re-read


def test_prefill_time_other_presets_by_name():
    res = cli("prefill-time", "--model", "mistral-7b", "--hardware", "h100-sxm",
              "--prompt-len", "2048", "--chunk-size", "512")
    assert res.returncode == 0, res.stderr
    assert "assumed efficiencies" in res.stdout.splitlines()[0]
    assert len(res.stdout.splitlines()) == 2 + 4 + 1


@pytest.mark.parametrize("args, flag", [
    (["--model", "gpt-5"], "--model"),
    (["--hardware", "tpu-v5"], "--hardware"),
    (["--prompt-len", "200001"], "--prompt-len"),
    (["--prompt-len", "0"], "--prompt-len"),
    (["--chunk-size", "-512"], "--chunk-size"),
    (["--chunk-size", "x"], "--chunk-size"),
    (["--tp", "3"], "--tp"),
    (["--tp", "0"], "--tp"),
    (["--model", "llama-2-70b", "--tp", "1"], "--tp"),  # 138 GB of weights on one GPU
    (["--calibration", "vidur"], "--calibration"),
    (["--model", "mistral-7b", "--calibration", "sarathi-serve"], "--calibration"),
])
def test_prefill_time_bad_input_one_line_naming_the_flag(args, flag):
    base = {"--prompt-len": "1024", "--chunk-size": "512"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    res = cli("prefill-time", *[x for kv in base.items() for x in kv])
    assert res.returncode == 2, (args, res.stdout)
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "error:" in res.stderr, res.stderr
    assert flag in res.stderr, res.stderr


def test_trace_prints_exactly_the_package_table():
    """Notebook 02 shows the CLI's table beside the package's: they are the same text."""
    from chunkprefill import CacheConfig, SchedulerConfig, format_trace_table, run_trace
    from chunkprefill.trace import article_trace_requests

    res = cli("trace", "--budget", "16", "--decodes", "6", "--prompt", "40", "--steps", "8")
    steps = run_trace(article_trace_requests(num_decodes=6, prompt_len=40),
                      SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16),
                      CacheConfig(block_size=16, num_blocks=1000))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == format_trace_table(steps[:8])

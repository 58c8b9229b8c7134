"""Command line.

``python -m chunkprefill trace --budget 16 --decodes 6 --prompt 40``: the article's trace.
``python -m chunkprefill prefill-time --model yi-34b --tp 2 --hardware a100-80gb-pcie
--prompt-len 8192 --chunk-size 512``: one prompt's prefill alone, predicted chunk by chunk
by the cost model (calibrated on real measurements where the setup has a calibration);
the last line is ``prefill_ms=X``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.trace import (
    article_trace_requests,
    format_trace_table,
    run_trace,
    with_shared_prefix,
)


def _positive(name: str, lo: int = 1):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{name} must be >= {lo}, got {v}")
        return v
    return parse


def _fraction(name: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not 0.0 <= v < 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be in [0.0, 1.0), got {v}")
        return v
    return parse


# SchedulerConfig's parameter -> the flag that sets it, to name the flag in an error.
_FLAGS = {
    "max_num_active_seqs": "--max-num-active-seqs",
    "long_prefill_token_threshold_adaptive": "--long-prefill-token-threshold-adaptive",
    "long_prefill_token_threshold": "--threshold",
    "prefill_schedule_interval": "--prefill-schedule-interval",
    "max_num_batched_tokens": "--budget",
    "max_num_seqs": "--max-num-seqs",
    "max_model_len": "--max-model-len",
    "watermark": "--watermark",
    "batching": "--batching",
    "policy": "--policy",
    "priority": "--prompt-priority",
}


class _OneLineErrors(argparse.ArgumentParser):
    """Bad flags print one line (no usage dump) and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineErrors(prog="python -m chunkprefill", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_OneLineErrors)
    t = sub.add_parser("trace", help="the article's token-budget trace: decodes + one long prompt")
    t.add_argument("--budget", type=_positive("--budget"), default=16,
                   help="max_num_batched_tokens (default 16)")
    t.add_argument("--decodes", type=_positive("--decodes", 0), default=6,
                   help="requests already decoding (default 6)")
    t.add_argument("--prompt", type=_positive("--prompt"), default=40,
                   help="long prompt length in tokens (default 40)")
    t.add_argument("--prompt-output", type=_positive("--prompt-output"), default=3,
                   help="tokens the long prompt generates (default 3)")
    t.add_argument("--decode-len", type=_positive("--decode-len"), default=20,
                   help="tokens each decode generates (default 20)")
    t.add_argument("--arrival-step", type=_positive("--arrival-step", 0), default=2,
                   help="step at which the long prompt arrives (default 2)")
    t.add_argument("--threshold", type=_positive("--threshold", 0), default=0,
                   help="long_prefill_token_threshold (default 0 = off)")
    t.add_argument("--max-num-seqs", type=_positive("--max-num-seqs"), default=None,
                   help="max_num_seqs (default min(128, budget))")
    t.add_argument("--max-model-len", type=_positive("--max-model-len", 2), default=None,
                   help="max_model_len (default 8192; with --no-chunking it must be <= budget)")
    t.add_argument("--no-chunking", action="store_true", help="enable_chunked_prefill=False")
    t.add_argument("--policy", choices=("fcfs", "priority"), default="fcfs",
                   help="vLLM's queue order: fcfs (arrival) or priority (lower "
                   "--prompt-priority first; preempts the largest (priority, arrival))")
    t.add_argument("--prompt-priority", type=int, default=0,
                   help="priority of the long prompt P (the decodes have 0; default 0)")
    t.add_argument("--batching", choices=("mixed", "prefill_or_decode", "prefill_first"),
                   default="mixed",
                   help="mixed: vLLM V1 (prompt chunks beside decodes, default); "
                   "prefill_or_decode: SGLang's default (a step is prefill or decode); "
                   "prefill_first: whole prompts first (vLLM V0 with chunking off)")
    t.add_argument("--long-prefill-token-threshold-adaptive",
                   action=argparse.BooleanOptionalAction, default=False,
                   help="floor --threshold at budget // (running + waiting) (default off)")
    t.add_argument("--prefill-schedule-interval", type=_positive("--prefill-schedule-interval"),
                   default=1, help="prefill only every N executed steps while something "
                   "decodes (vLLM's capacity escape applies; default 1 = every step)")
    t.add_argument("--max-num-active-seqs", type=_positive("--max-num-active-seqs"),
                   default=None, help="admission limit into running, <= max_num_seqs "
                   "(default: max_num_seqs)")
    t.add_argument("--watermark", type=_fraction("--watermark"), default=0.0,
                   help="fraction of KV blocks kept free when admitting (default 0.0)")
    t.add_argument("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction,
                   default=True, help="admit a prompt only if its whole sequence fits in the "
                   "KV cache (default on; --no-scheduler-reserve-full-isl: first chunk only)")
    t.add_argument("--block-size", type=_positive("--block-size"), default=16)
    t.add_argument("--num-blocks", type=_positive("--num-blocks"), default=1000)
    t.add_argument("--shared-prefix", type=_positive("--shared-prefix"), default=None,
                   metavar="N", help="prefix caching on, and a request S whose prompt is the "
                   "long prompt's first N tokens arrives at step 0: P then hits S's full blocks")
    t.add_argument("--steps", type=_positive("--steps"), default=None,
                   help="print only the first N steps")
    t.add_argument("--json", action="store_true",
                   help="print the steps as a JSON list of {request_id: num_tokens}")
    f = sub.add_parser("prefill-time",
                       help="one prompt's prefill alone, chunk by chunk, on the cost model")
    f.add_argument("--model", default="Yi-34B", help="model preset, any case (default Yi-34B)")
    f.add_argument("--tp", type=_positive("--tp"), default=None,
                   help="tensor_parallel_size (default: the preset's)")
    f.add_argument("--hardware", default="A100-80GB-PCIe",
                   help="hardware preset, any case (default A100-80GB-PCIe)")
    f.add_argument("--prompt-len", type=_positive("--prompt-len"), required=True,
                   help="prompt tokens (<= the model's max_model_len)")
    f.add_argument("--chunk-size", type=_positive("--chunk-size"), required=True,
                   help="largest chunk in tokens (>= prompt-len: unchunked)")
    f.add_argument("--calibration", default="auto",
                   help="auto (a named calibration if one was measured on this setup, else "
                        "datasheet peaks and assumed efficiencies), none, or a name "
                        "(sarathi-serve)")
    return p


def _prefill_cost_model(args: argparse.Namespace) -> tuple[Any, str]:
    """The cost model the flags name, and how its efficiencies were obtained. Every
    ValueError is re-raised naming the flag that caused it."""
    from chunkprefill.sim import CALIBRATIONS, CostModel, HardwareSpec, ModelSpec

    def flag(name: str, make: Callable[[], Any]) -> Any:
        try:
            return make()
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None

    spec = flag("--model", lambda: ModelSpec.preset(args.model))
    if args.tp is not None:
        spec = flag("--tp", lambda: spec.with_tp(args.tp))
    hw = flag("--hardware", lambda: HardwareSpec.preset(args.hardware))
    setup = (spec.name, hw.name, spec.tensor_parallel_size)
    name = args.calibration
    if name == "auto":
        name = next((n for n, s in CALIBRATIONS.items() if s == setup), "none")
    if name != "none" and name not in CALIBRATIONS:
        raise ValueError(f"--calibration must be auto, none or one of {sorted(CALIBRATIONS)}, "
                         f"got {name!r}")
    if name == "none":
        return flag("--tp", lambda: CostModel(spec, hw)), "datasheet peaks, assumed efficiencies"
    cm = flag("--calibration", lambda: CostModel.preset(
        spec.name, hw.name, spec.tensor_parallel_size, calibrated=name))
    return cm, f"calibrated on {name} measurements"


def _prefill_time(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from chunkprefill.sim import prefill_chunk_times

    try:
        cm, how = _prefill_cost_model(args)
        limit = cm.model.max_model_len
        if args.prompt_len > limit:
            raise ValueError(f"--prompt-len must be <= {limit} ({cm.model.name}'s "
                             f"max_model_len), got {args.prompt_len}")
        chunks = prefill_chunk_times(cm, args.prompt_len, args.chunk_size)
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    print(f"{cm.model.name} TP{cm.model.tensor_parallel_size} on {cm.hardware.name} ({how}); "
          f"prompt {args.prompt_len} tokens, chunks of at most {args.chunk_size}")
    print(f"{'chunk':>6} {'tokens':>7} {'context':>8} {'step_ms':>10}")
    for i, (q, c, t) in enumerate(chunks, 1):
        print(f"{i:>6} {q:>7} {c:>8} {t * 1e3:>10.3f}")
    print(f"prefill_ms={sum(t for *_, t in chunks) * 1e3:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "prefill-time":
        return _prefill_time(parser, args)
    try:
        sc = SchedulerConfig.for_budget(
            args.budget, max_model_len=args.max_model_len or 8192,
            max_num_seqs=args.max_num_seqs, chunked=not args.no_chunking,
            threshold=args.threshold, batching=args.batching, policy=args.policy,
            long_prefill_token_threshold_adaptive=args.long_prefill_token_threshold_adaptive,
            prefill_schedule_interval=args.prefill_schedule_interval,
            max_num_active_seqs=args.max_num_active_seqs,
            watermark=args.watermark,
            scheduler_reserve_full_isl=args.scheduler_reserve_full_isl,
        )
        cc = CacheConfig(block_size=args.block_size, num_blocks=args.num_blocks,
                         enable_prefix_caching=args.shared_prefix is not None)
        reqs = article_trace_requests(args.decodes, args.prompt, args.decode_len,
                                   args.arrival_step, args.prompt_output)
        if args.prompt_priority:
            reqs[-1] = dataclasses.replace(reqs[-1], priority=args.prompt_priority)
        if args.shared_prefix is not None:
            reqs = with_shared_prefix(reqs, args.shared_prefix)
        steps = run_trace(reqs, sc, cc)
    except ValueError as e:
        flag = next((f for name, f in _FLAGS.items() if name in str(e)), None)
        where = f"{flag}: " if flag else ""
        parser.exit(2, f"{parser.prog}: error: {where}{e}\n")
    if args.steps:
        steps = steps[: args.steps]
    if args.json:
        print(json.dumps([s.num_scheduled_tokens for s in steps]))
    else:
        print(format_trace_table(steps))
        for s in steps:
            for rid, n in s.num_cached_tokens.items():
                if n:
                    print(f"step {s.step}: {rid} admitted with {n} tokens from the prefix "
                          "cache")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... | head` closed the pipe: not an error
        sys.stderr.close()
        sys.exit(0)

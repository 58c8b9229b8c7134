"""Data shipped inside the package, read at run time (package data, see pyproject.toml).

``sarathi_serve/``: measured batch times of Yi-34B on two A100 80GB PCIe GPUs, the same
setup's chunked-prefill times, and the ShareGPT request lengths, copied from the
Sarathi-Serve artifact with its license and an attribution README. The readers return plain
numbers; units are converted here, once (figure-2 files are in seconds, the table-2 and
figure-9 folders' files in milliseconds). "table-2" is the artifact's folder of hybrid
batches, not the paper's Table 2 (its dataset table)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

SARATHI_DIR = "sarathi_serve"
SHAREGPT_FILE = "sharegpt_8k_lengths_llama2_tokenizer.csv"
CHUNKING_FILE = "fig9_chunking_overhead_yi34b_tp2_a100.csv"
TABLE2_FOLDER = "table-2 folder"  # the artifact's osdi-experiments/table-2, not Table 2


def _rows(name: str) -> list[dict[str, str]]:
    path = resources.files(__package__).joinpath(SARATHI_DIR, name)
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class MeasuredBatch:
    """One batch the Sarathi-Serve authors timed: how many prefill tokens (one request) and
    decode tokens (one per request) it held, its time in seconds, and, in the table-2
    folder only, the time of its linear layers and of its attention (seconds)."""

    source: str  # "figure 2" (the paper's figure) or "table-2 folder" (the artifact's)
    num_prefill_tokens: int
    num_decodes: int
    seconds: float
    linear_s: float | None = None
    attention_s: float | None = None

    @property
    def label(self) -> str:
        kind = ("hybrid" if self.num_prefill_tokens and self.num_decodes
                else "prefill" if self.num_prefill_tokens else "decode")
        return (f"{self.source} {kind}: {self.num_prefill_tokens} prefill + "
                f"{self.num_decodes} decode tokens")


@lru_cache(maxsize=1)
def sarathi_serve_batches() -> tuple[MeasuredBatch, ...]:
    """The 19 measured batches of Yi-34B, TP 2, two A100 80GB PCIe (figure 2: 8 prefill-only,
    8 decode-only; the artifact's table-2 folder: decode-only, hybrid, prefill-only)."""
    out = []
    for name in ("fig2_prefill_batches_yi34b_tp2_a100.csv",
                 "fig2_decode_batches_yi34b_tp2_a100.csv"):
        for r in _rows(name):  # batch_execution_time in seconds
            out.append(MeasuredBatch("figure 2", int(r["batch_num_prefill_tokens"]),
                                     int(r["batch_num_decode_tokens"]),
                                     float(r["batch_execution_time"])))
    for r in _rows("table2_hybrid_batches_yi34b_tp2_a100.csv"):  # milliseconds
        out.append(MeasuredBatch(TABLE2_FOLDER, int(r["batch_num_prefill_tokens"]),
                                 int(r["batch_num_decode_tokens"]),
                                 float(r["batch_execution_time"]) / 1e3,
                                 float(r["linear"]) / 1e3, float(r["attention"]) / 1e3))
    return tuple(out)


@dataclass(frozen=True)
class MeasuredChunkedPrefill:
    """One prompt prefilled alone in chunks of ``chunk_size`` tokens (``chunk_size >=
    prompt_len``: in one piece), as the Sarathi-Serve authors timed it for their figure 9:
    the summed time of its prefill batches in seconds, mean of 5 requests, and that time
    relative to the same prompt in one piece."""

    prompt_len: int
    chunk_size: int
    seconds: float
    relative: float


@lru_cache(maxsize=1)
def sarathi_serve_chunked_prefills() -> tuple[MeasuredChunkedPrefill, ...]:
    """The 16 chunked-prefill measurements of the artifact's figure-9 folder (Yi-34B, TP 2,
    two A100 80GB PCIe; prompts of 2047, 4095, 8191, 16383 tokens; chunks of 512, 1024,
    2048 and 16384, the last one piece). Not used by any fit: held out to check one."""
    return tuple(MeasuredChunkedPrefill(int(r["prefill_length"]), int(r["chunk_size"]),
                                        float(r["prefill_execution_time"]) / 1e3,  # ms
                                        float(r["prefill_execution_time_relative"]))
                 for r in _rows(CHUNKING_FILE))


@lru_cache(maxsize=1)
def sharegpt_lengths() -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths, output lengths) of the 30,731 ShareGPT requests Sarathi-Serve
    serves (Llama-2 tokens, filtered to 8K), in file order, int64, read-only."""
    rows = _rows(SHAREGPT_FILE)
    prompt = np.array([int(r["num_prefill_tokens"]) for r in rows], dtype=np.int64)
    output = np.array([int(r["num_decode_tokens"]) for r in rows], dtype=np.int64)
    prompt.flags.writeable = output.flags.writeable = False
    return prompt, output

"""The article's paper trace as code: drive the real ``Scheduler`` with a fake model that
samples a fixed token, and record who got how many tokens each step. No timing is
involved: a trace tracks the token budget, not how long a step takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from chunkprefill.checks import check_int, check_priority
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.i18n import tr
from chunkprefill.kv_cache import PrefixCacheStats
from chunkprefill.request import Request
from chunkprefill.scheduler import Scheduler, TokenSplit

FAKE_TOKEN_ID = 1
# Placeholder prompts count up from here: far above any vocabulary used with explicit ids,
# so they never collide with a given prompt (or with FAKE_TOKEN_ID).
UNIQUE_TOKEN_BASE = 1 << 40


@dataclass(frozen=True)
class TraceRequest:
    """A request of the paper trace: lengths, and optionally the prompt's token ids (so
    that requests can share a prefix for the prefix cache). Without ids every request
    gets tokens no other request has."""

    request_id: str
    prompt_len: int
    output_len: int
    arrival_step: int = 0
    prompt_token_ids: tuple[int, ...] | None = field(default=None, repr=False)  # long
    priority: int = 0  # vLLM's: lower first, with SchedulerConfig(policy="priority")

    def __post_init__(self) -> None:
        for name, lo in (("prompt_len", 1), ("output_len", 1), ("arrival_step", 0)):
            check_int(f"{name} of {self.request_id!r}", getattr(self, name), lo)
        check_priority(self.priority)
        ids = self.prompt_token_ids
        if ids is None:
            return
        name = f"prompt_token_ids of {self.request_id!r}"
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
            raise ValueError(f"{name} must be a sequence of integers >= 0, got {ids!r}")
        ids = tuple(check_int(name, t, 0) for t in ids)
        if len(ids) != self.prompt_len:
            raise ValueError(f"{name} must hold prompt_len={self.prompt_len} ids, "
                             f"got {len(ids)}")
        object.__setattr__(self, "prompt_token_ids", ids)


@dataclass
class TraceStep:
    """What one ``schedule()`` call decided, and the state right after the step. Per
    scheduled request, the scheduler's own facts (as ``SchedulerOutput`` has them):
    ``num_computed_tokens`` (where its tokens started), ``token_splits`` (what they
    computed) and ``num_cached_tokens`` (the prefix-cache hit of a request admitted this
    step). After the step: ``num_computed_tokens_after`` for every unfinished request, the
    free blocks, who runs and who waits, and vLLM's prefix-cache stats so far."""

    step: int
    num_scheduled_tokens: dict[str, int]
    preempted: list[str]
    finished: list[str]
    token_budget: int
    num_computed_tokens: dict[str, int]
    token_splits: dict[str, TokenSplit]
    num_computed_tokens_after: dict[str, int]
    num_free_blocks: int  # after the step's finished requests freed their blocks
    running: list[str]
    waiting: list[str]
    num_cached_tokens: dict[str, int] = field(default_factory=dict)
    prefix_cache_stats: PrefixCacheStats | None = None

    @property
    def budget_left(self) -> int:
        return self.token_budget - sum(self.num_scheduled_tokens.values())


def max_seq_len(requests: Sequence[TraceRequest]) -> int:
    """The longest sequence (prompt + outputs) among ``requests``: the smallest
    ``max_model_len`` that serves every one of them untruncated."""
    return max(r.prompt_len + r.output_len for r in requests)


def run_trace(
    requests: Sequence[TraceRequest],
    scheduler_config: SchedulerConfig,
    cache_config: CacheConfig,
    max_steps: int = 100_000,
    scheduler_cls: type[Scheduler] = Scheduler,
    *,
    stop_after: int | None = None,
) -> list[TraceStep]:
    """Step k is the k-th ``schedule()`` call; requests with ``arrival_step == k`` are
    added in list order just before it, with ``arrival_time = k`` (what orders equal
    priorities under ``policy="priority"``; then the request id, as in vLLM). Every
    scheduled request with nothing left owed samples one token; a request finishes after
    ``output_len`` tokens (or at ``max_model_len``). Runs until every request has finished.
    ``scheduler_cls``: a ``Scheduler`` subclass to run instead (an exercise plants a bug
    in one to be found with a trace). ``stop_after``: return the first ``stop_after``
    steps, finished or not (a livelock never finishes; its start is the evidence)."""
    if stop_after is not None:
        check_int("stop_after", stop_after, 1)
    ids = [r.request_id for r in requests]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"request_id must be unique; duplicated: {dupes}")
    sched = scheduler_cls(scheduler_config, cache_config)
    kv = sched.kv_cache_manager
    pending = sorted(requests, key=lambda r: r.arrival_step)  # stable: keeps list order
    prompts, next_token = {}, 0
    for r in requests:  # requests without ids get tokens no other request has
        if r.prompt_token_ids is None:
            prompts[r.request_id] = list(range(UNIQUE_TOKEN_BASE + next_token,
                                               UNIQUE_TOKEN_BASE + next_token + r.prompt_len))
            next_token += r.prompt_len
        else:
            prompts[r.request_id] = list(r.prompt_token_ids)
    steps: list[TraceStep] = []
    k = 0
    while pending or sched.has_unfinished_requests():
        if k == stop_after:
            break
        if k >= max_steps:
            raise RuntimeError(f"trace did not finish within max_steps={max_steps}")
        while pending and pending[0].arrival_step == k:
            r = pending.pop(0)
            sched.add_request(Request(r.request_id, prompts[r.request_id],
                                      max_tokens=r.output_len, arrival_time=float(k),
                                      priority=r.priority))
        out = sched.schedule()
        sampled = {rid: FAKE_TOKEN_ID for rid in out.num_scheduled_tokens
                   if sched.requests[rid].num_owed_tokens == 0}
        finished = sched.update_from_output(out, sampled)
        steps.append(TraceStep(
            step=k,
            num_scheduled_tokens=dict(out.num_scheduled_tokens),
            preempted=list(out.preempted_req_ids),
            finished=finished,
            token_budget=scheduler_config.max_num_batched_tokens,
            num_computed_tokens=out.num_computed_tokens,
            token_splits=out.token_splits,
            num_computed_tokens_after={rid: r.num_computed_tokens
                                       for rid, r in sched.requests.items()},
            num_free_blocks=kv.num_free_blocks,
            running=[r.request_id for r in sched.running],
            waiting=[r.request_id for r in sched.waiting],
            num_cached_tokens=dict(out.num_cached_tokens),
            prefix_cache_stats=(replace(kv.prefix_cache_stats) if kv.enable_caching else None),
        ))
        k += 1
    return steps


def format_trace_table(steps: Sequence[TraceStep], request_ids: Sequence[str] | None = None) -> str:
    """The article's table: steps as rows, requests as columns, the leftover budget last.
    ``P*`` marks a preempted request; ``-`` means not scheduled that step."""
    if request_ids is None:
        seen: dict[str, None] = {}
        for s in steps:
            seen.update(dict.fromkeys(s.num_scheduled_tokens))
            seen.update(dict.fromkeys(s.preempted))
        request_ids = list(seen)
    cols = ["step", *request_ids, "used", "left"]
    rows = []
    for s in steps:
        cells = [str(s.step)]
        for rid in request_ids:
            n = s.num_scheduled_tokens.get(rid)
            cell = "-" if n is None else str(n)
            if rid in s.preempted:
                cell += "*"
            cells.append(cell)
        used = sum(s.num_scheduled_tokens.values())
        cells += [str(used), str(s.token_budget - used)]
        rows.append(cells)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def article_trace_requests(num_decodes: int = 6, prompt_len: int = 40, decode_len: int = 20,
                        prompt_arrival_step: int = 2, prompt_output_len: int = 3
                        ) -> list[TraceRequest]:
    """The article's workload: ``num_decodes`` 1-token prompts that are decoding by the
    time a long prompt P arrives at ``prompt_arrival_step``."""
    reqs = [TraceRequest(f"D{i + 1}", prompt_len=1, output_len=decode_len, arrival_step=0)
            for i in range(num_decodes)]
    reqs.append(TraceRequest("P", prompt_len=prompt_len, output_len=prompt_output_len,
                             arrival_step=prompt_arrival_step))
    return reqs


def with_shared_prefix(requests: Sequence[TraceRequest], prefix_len: int,
                       target: str = "P", sharer: str = "S") -> list[TraceRequest]:
    """``requests`` with explicit prompt ids for ``target`` and a request ``sharer``
    (arrival step 0, one output token, placed just before the target) whose prompt is
    the target's first ``prefix_len`` tokens: a system prompt whose full blocks are in
    the prefix cache once computed (even if only in the target's arrival step)."""
    reqs = list(requests)
    idx = next((i for i, r in enumerate(reqs) if r.request_id == target), None)
    if idx is None:
        raise ValueError(f"target must name one of the requests, got {target!r}")
    t = reqs[idx]
    check_int("prefix_len", prefix_len, 1, t.prompt_len)
    ids = t.prompt_token_ids or tuple(range(2, 2 + t.prompt_len))
    reqs[idx] = TraceRequest(t.request_id, t.prompt_len, t.output_len, t.arrival_step, ids)
    reqs.insert(idx, TraceRequest(sharer, prefix_len, 1, 0, ids[:prefix_len]))
    return reqs


def prompt_chunks(steps: Sequence[TraceStep | Any], request_id: str) -> list[int]:
    """The sizes of the chunks that computed ``request_id``'s prompt, in step order: its
    steps with prefill tokens (``token_splits``; a prefix-cache hit is not a chunk, nor is
    a recomputation after a preemption). Works on ``run_trace`` steps and on an engine's
    ``step_log`` alike. A request alone with budget to spare has one chunk."""
    return [split.prefill for s in steps
            if (split := s.token_splits.get(request_id)) is not None and split.prefill]


def prompt_summary(steps: Sequence[TraceStep], prompt_id: str = "P") -> str:
    """One line on the long prompt ``prompt_id``: its chunks, and the step of its first
    decode (notebook 02's panel and the site's live trace page print it; no matplotlib
    here, so it runs in Pyodide too)."""
    chunks = [(s.step, split.prefill) for s in steps
              if (split := s.token_splits.get(prompt_id)) is not None and split.prefill]
    first_decode = next((s.step for s in steps if (split := s.token_splits.get(prompt_id))
                         is not None and split.decode), None)
    fields = {"prompt_id": prompt_id, "n": len(chunks), "sizes": [n for _, n in chunks],
              "first": chunks[0][0]}
    if len(chunks) == 1 and first_decode is not None:
        return tr("{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in step {first}; its first "
                  "decode is step {decode}.", **fields, decode=first_decode)
    if len(chunks) == 1:
        return tr("{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in step {first}.", **fields)
    if first_decode is not None:
        return tr("{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in steps {first}-{last}; its "
                  "first decode is step {decode}.", **fields, last=chunks[-1][0],
                  decode=first_decode)
    return tr("{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in steps {first}-{last}.",
              **fields, last=chunks[-1][0])

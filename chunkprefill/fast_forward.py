"""The simulator's fast path: many plain decode steps applied at once.

A simulated decode-only stretch costs one pass over the running requests instead of one
``schedule()`` + ``update_from_output()`` per step, which is what lets 10,000 requests
simulate in seconds. It must be invisible: ``tests/test_fast_forward.py`` runs workloads
both ways and compares every step, bit for bit.

It lives here, not in ``scheduler.py``, so that a reader of the scheduler meets only vLLM's
rules. It reaches the scheduler through a narrow interface: it *reads* ``Scheduler.running``,
``Scheduler.waiting``, ``Scheduler.max_model_len`` and the ``KVCacheManager``'s
``block_tables``, ``block_size`` and ``num_free_blocks``; it *writes* only through
``KVCacheManager.append_blocks`` (new blocks, in the order ``schedule()`` would take them),
``Scheduler.stop_requests`` (finish requests whose last token it appended) and each running
``Request``'s token counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chunkprefill.checks import check_int
from chunkprefill.scheduler import Scheduler


@dataclass
class DecodeRun:
    """What ``advance_decode_run`` did: ``num_steps`` plain decode steps of
    ``request_ids`` (the running requests, in order), each running ``num_steps_each[i]``
    of them (fewer if it stopped); ``finished[k]``: the requests that stopped in step k
    (0-based); the free KV blocks after each step."""

    num_steps: int
    request_ids: list[str]
    num_steps_each: list[int]
    finished: list[list[str]]
    num_free_blocks: list[int]


@dataclass
class _DecodePlan:
    """A run of plain decode steps, per running request (in order): its id,
    ``num_computed_tokens``, the steps until it stops, and its block table (the list)."""

    num_steps: int
    request_ids: list[str]
    context_lens: list[int]
    steps_left: list[int]
    block_tables: list[list[int]]

    def num_new_blocks(self, num_steps: int, block_size: int) -> int:
        """Blocks taken in ``num_steps`` steps: request i's KV then covers positions up
        to ``context_lens[i] + min(steps_left[i], num_steps) - 1``."""
        total = 0
        for c, left, table in zip(self.context_lens, self.steps_left, self.block_tables,
                                  strict=True):
            need = (c + min(left, num_steps) - 1) // block_size + 1 - len(table)
            if need > 0:
                total += need
        return total

    def block_events(self, num_steps: int, block_size: int) -> list[tuple[int, int]]:
        """(step k, request index i) for every block taken in ``num_steps`` steps, sorted:
        the order schedule() takes them, step by step and within a step in running order.
        Request i's block j (0-based) is taken in the step k whose position,
        ``num_computed_tokens + k - 1``, is ``j * block_size``."""
        events: list[tuple[int, int]] = []
        for i, (c, left, table) in enumerate(zip(self.context_lens, self.steps_left,
                                                 self.block_tables, strict=True)):
            needed = (c + (left if left < num_steps else num_steps) - 1) // block_size + 1
            if needed > len(table):
                events.extend((j * block_size - c + 1, i) for j in range(len(table), needed))
        events.sort()
        return events


def decode_run_length(scheduler: Scheduler, max_steps: int, token_id: int) -> int:
    """How many of the next steps (at most ``max_steps``) are certain to be *plain
    decode steps*, given that every request samples ``token_id`` and nothing arrives:
    each running request gets exactly 1 token per step, in the same order, until it
    stops (``eos_token_id``, ``max_tokens`` or ``max_model_len``) and drops out; nobody
    is admitted or preempted. 0 if the next step is not one. Why it is certain: with
    the waiting queue empty and every running request owing 1 token, ``schedule()``
    hands each of them 1 token (the budget holds one per request: SchedulerConfig
    demands max_num_batched_tokens >= max_num_seqs), and a decode needs at most one
    new KV block per ``block_size`` steps (checked: all of them fit the blocks free
    now, so no allocation can fail)."""
    plan = _plan_decode_run(scheduler, max_steps, token_id)
    return 0 if plan is None else plan.num_steps


def _plan_decode_run(scheduler: Scheduler, max_steps: int, token_id: int) -> _DecodePlan | None:
    """The longest run of plain decode steps, at most ``max_steps``; None if there is
    none. One pass over the running requests."""
    running = scheduler.running
    if scheduler.waiting or not running or max_steps < 1:
        return None
    if scheduler.kv_cache_manager.enable_caching:
        return None  # not modelled: with prefix caching, blocks a decode fills get hashed
    if scheduler.scheduler_config.prefill_schedule_interval > 1:
        return None  # not modelled: the prefill cadence counts every step
    if running[-1].num_owed_tokens != 1:  # the newest is the likeliest to be prefilling
        return None
    kv = scheduler.kv_cache_manager
    mml, tables = scheduler.max_model_len, kv.block_tables
    steps_left = []
    for r in running:
        if r.num_owed_tokens != 1 or not r.output_token_ids or r.is_prefill_chunk:
            return None  # not a decode: (the last token of) a prompt, or resumed
        left = r.max_tokens - len(r.output_token_ids)  # tokens until it stops
        if mml - r.num_tokens < left:
            left = mml - r.num_tokens
        steps_left.append(1 if token_id == r.eos_token_id else left)
    ids = [r.request_id for r in running]
    plan = _DecodePlan(min(max_steps, max(steps_left)), ids,
                       [r.num_computed_tokens for r in running], steps_left,
                       [tables[rid] for rid in ids])
    k = plan.num_steps
    # KV: every block the run takes must be free now (blocks freed by requests that
    # stop meanwhile are not counted: a shorter run, never a wrong one). The count is
    # monotone in the step count, so bisect for the largest that fits.
    free = kv.num_free_blocks
    if plan.num_new_blocks(k, kv.block_size) > free:
        lo, hi = 0, k  # lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            fits = plan.num_new_blocks(mid, kv.block_size) <= free
            lo, hi = (mid, hi) if fits else (lo, mid)
        plan.num_steps = lo
    return plan if plan.num_steps else None


def advance_decode_run(scheduler: Scheduler, max_steps: int, token_id: int,
                       choose: Callable[[int, list[int], list[int]], int] | None = None,
                       ) -> DecodeRun:
    """Apply the next plain decode steps at once (at most ``max_steps``; see
    ``decode_run_length``): the same state (tokens, ``num_computed_tokens``, block
    tables block for block, free-block order, finished requests) as that many rounds
    of ``schedule()`` + ``update_from_output()`` with every request sampling
    ``token_id``. ``choose(k, context_lens, steps_left)`` may take fewer than the k
    possible steps (the simulator stops at the next arrival, which depends on step
    times only its executor knows): it gets each running request's
    ``num_computed_tokens`` and the steps until it stops, and returns 1..k.
    A result with ``num_steps == 0``: the next step is not a plain decode step and
    nothing was done. The run makes no ``SchedulerOutput``: the next ``schedule()``
    reports every request finished since the previous one (``Scheduler.stop_requests``)."""
    check_int("max_steps", max_steps, 1)
    plan = _plan_decode_run(scheduler, max_steps, token_id)
    if plan is None:
        return DecodeRun(0, [], [], [], [])
    k, steps_left = plan.num_steps, plan.steps_left
    num_steps = k if choose is None else choose(k, plan.context_lens, steps_left)
    if not (isinstance(num_steps, int) and 1 <= num_steps <= k):
        raise ValueError(f"choose must return a step count from 1 to {k}, got {num_steps!r}")
    running, kv = scheduler.running, scheduler.kv_cache_manager
    # 1. New blocks, in the order schedule() takes them; free_delta[k]: free blocks
    #    gained (+) or taken (-) in step k.
    events = plan.block_events(num_steps, kv.block_size)
    kv.append_blocks([plan.request_ids[i] for _, i in events])
    free_delta = [0] * (num_steps + 1)
    for step, _ in events:
        free_delta[step] -= 1
    # 2. Each request runs min(steps_left, num_steps) steps; those that stop, stop in
    #    step order and within a step in running order (update_from_output's order),
    #    freeing their blocks to the back of the free list after every block taken
    #    above (all of which came from the front).
    tokens = [token_id] * num_steps
    stops: list[tuple[int, int]] = []
    num_steps_each = []
    for i, r in enumerate(running):
        steps = steps_left[i] if steps_left[i] < num_steps else num_steps
        num_steps_each.append(steps)
        r.num_computed_tokens += steps
        r.output_token_ids.extend(tokens if steps == num_steps else tokens[:steps])
        r.num_tokens += steps
        if steps == steps_left[i]:
            stops.append((steps, i))
    stops.sort()
    finished: list[list[str]] = [[] for _ in range(num_steps)]
    for step, i in stops:
        free_delta[step] += len(plan.block_tables[i])
        finished[step - 1].append(plan.request_ids[i])
    scheduler.stop_requests([running[i] for _, i in stops])
    free_after, free = [], kv.num_free_blocks - sum(free_delta)
    for step in range(1, num_steps + 1):
        free += free_delta[step]
        free_after.append(free)
    return DecodeRun(num_steps, plan.request_ids, num_steps_each, finished, free_after)

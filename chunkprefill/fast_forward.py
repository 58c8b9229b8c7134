"""Fast-forward: many plain decode steps applied at once.

A decode-only stretch costs one pass over the running requests instead of one
``schedule()`` + ``update_from_output()`` per step, which is what lets 10,000 simulated
requests run in seconds. It must be invisible: ``tests/test_fast_forward.py`` runs workloads
both ways and compares every step, bit for bit. The engine owns it (``LLMEngine.
step_fast_forward``): ``plan`` says how many of the next steps are certain to be plain
decode steps, the executor prices them, ``apply`` moves the scheduler that many steps on.

It lives beside the scheduler, not inside it, so a reader of ``scheduler.py`` meets only
vLLM's rules. It *reads* ``Scheduler.running``, ``waiting``, ``max_model_len`` and the KV
manager's ``block_tables``, ``block_size`` and ``num_free_blocks``; it *writes* only through
``KVCacheManager.append_blocks`` (new blocks, in the order ``schedule()`` would take them),
``Scheduler.stop_requests`` and each running ``Request``'s token counters."""

from __future__ import annotations

from dataclasses import dataclass

from chunkprefill.checks import check_int
from chunkprefill.scheduler import Scheduler


@dataclass
class FastForwardPlan:
    """The next ``num_steps`` plain decode steps, per running request (in order): its id,
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


@dataclass
class FastForward:
    """What ``apply`` did: ``num_steps`` plain decode steps of ``request_ids`` (the running
    requests, in order), request i running ``num_steps_each[i]`` of them (fewer if it
    stopped); ``finished[k]``: the requests that stopped in step k (0-based); the free KV
    blocks after each step."""

    num_steps: int
    request_ids: list[str]
    num_steps_each: list[int]
    finished: list[list[str]]
    num_free_blocks: list[int]


def plan(scheduler: Scheduler, max_steps: int, token_id: int) -> FastForwardPlan | None:
    """How many of the next steps (at most ``max_steps``) are certain to be *plain decode
    steps*, given that every request samples ``token_id`` and nothing arrives: each running
    request gets exactly 1 token per step, in the same order, until it stops
    (``eos_token_id``, ``max_tokens`` or ``max_model_len``) and drops out; nobody is
    admitted or preempted. None if the next step is not one. Why it is certain: with the
    waiting queue empty and every running request owing 1 token, ``schedule()`` hands each
    of them 1 token (``SchedulerConfig`` demands ``max_num_batched_tokens >=
    max_num_seqs``), and every block the run takes is free now, so no allocation fails."""
    check_int("max_steps", max_steps, 1)
    running = scheduler.running
    if scheduler.waiting or not running:
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
    p = FastForwardPlan(min(max_steps, max(steps_left)), ids,
                        [r.num_computed_tokens for r in running], steps_left,
                        [tables[rid] for rid in ids])
    # KV: every block the run takes must be free now (blocks freed by requests that stop
    # meanwhile are not counted: a shorter run, never a wrong one). The count is monotone
    # in the step count, so bisect for the largest that fits.
    free = kv.num_free_blocks
    if p.num_new_blocks(p.num_steps, kv.block_size) > free:
        lo, hi = 0, p.num_steps  # lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if p.num_new_blocks(mid, kv.block_size) <= free else (lo, mid)
        p.num_steps = lo
    return p if p.num_steps else None


def apply(scheduler: Scheduler, p: FastForwardPlan, num_steps: int,
          token_id: int) -> FastForward:
    """Apply the first ``num_steps`` (1 to ``p.num_steps``) steps of plan ``p``: the same
    state (tokens, ``num_computed_tokens``, block tables block for block, free-block order,
    finished requests) as that many rounds of ``schedule()`` + ``update_from_output()`` with
    every request sampling ``token_id``. The run makes no ``SchedulerOutput``: the next
    ``schedule()`` reports every request finished since the previous one."""
    check_int("num_steps", num_steps, 1, p.num_steps)
    steps_left = p.steps_left
    running, kv = scheduler.running, scheduler.kv_cache_manager
    # 1. New blocks, in the order schedule() takes them; free_delta[k]: free blocks
    #    gained (+) or taken (-) in step k.
    events = p.block_events(num_steps, kv.block_size)
    kv.append_blocks([p.request_ids[i] for _, i in events])
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
        free_delta[step] += len(p.block_tables[i])
        finished[step - 1].append(p.request_ids[i])
    scheduler.stop_requests([running[i] for _, i in stops])
    free_after, free = [], kv.num_free_blocks - sum(free_delta)
    for step in range(1, num_steps + 1):
        free += free_delta[step]
        free_after.append(free)
    return FastForward(num_steps, p.request_ids, num_steps_each, finished, free_after)

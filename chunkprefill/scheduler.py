"""vLLM V1's unified token-budget scheduler (synchronous, FCFS), small enough to read.

There is no prefill phase and no decode phase. Each step hands out at most
``max_num_batched_tokens`` tokens as a ``{request_id: num_tokens}`` dict: running requests
first (in admission order), then waiting ones. A long prompt simply owes many tokens and
receives whatever budget is left, one chunk per step: that is chunked prefill. Its KV
stays in its blocks, so the next chunk reads it instead of recomputing it.
Imports no torch: the same object drives the toy model and the cost-model simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.kv_cache import KVCacheManager
from chunkprefill.request import Request, RequestStatus
from chunkprefill.request_queue import create_request_queue


@dataclass
class SchedulerOutput:
    """One step's work. ``num_scheduled_tokens`` is in scheduling order (running
    requests first). ``num_computed_tokens[r]`` is where request r's tokens start this
    step; ``block_tables[r]`` is r's block table, not a copy: tables only ever grow at the
    end (a freed table is dropped, never edited), so the entries covering this step's tokens
    stay valid, and later steps may have appended more. ``finished_req_ids`` are the
    requests that finished since the previous ``schedule()`` (vLLM's meaning)."""

    num_scheduled_tokens: dict[str, int]
    num_computed_tokens: dict[str, int]
    block_tables: dict[str, list[int]]
    scheduled_new_req_ids: list[str] = field(default_factory=list)
    scheduled_resumed_req_ids: list[str] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    finished_req_ids: list[str] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    # Prefix caching on: for each request admitted from waiting this step, the tokens
    # its prefix-cache hit supplied (included in num_computed_tokens, not scheduled).
    num_cached_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


@dataclass
class _StepState:
    """What one schedule() call has decided so far."""

    token_budget: int
    num_scheduled: dict[str, int] = field(default_factory=dict)
    start: dict[str, int] = field(default_factory=dict)
    new_ids: list[str] = field(default_factory=list)
    resumed_ids: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)  # scheduled, in order
    carried_prefill: bool = False  # a prompt chunk ran or a prompt was admitted
    cached: dict[str, int] = field(default_factory=dict)  # prefix-cache hits at admission

    def add(self, request: Request, n: int) -> None:
        self.num_scheduled[request.request_id] = n
        self.start[request.request_id] = request.num_computed_tokens
        self.requests.append(request)
        self.token_budget -= n

    def remove(self, request: Request) -> None:
        """Undo ``add`` for a request preempted later in the same step (policy
        "priority" may preempt one already scheduled), returning its budget."""
        n = self.num_scheduled.pop(request.request_id, None)
        if n is not None:
            del self.start[request.request_id]
            self.requests.remove(request)
            self.token_budget += n


def _priority_order(request: Request) -> tuple[int, float]:
    return request.priority, request.arrival_time


class Scheduler:
    """Decides, each step, how many tokens each request runs (DESIGN.md section 4)."""

    def __init__(self, scheduler_config: SchedulerConfig, cache_config: CacheConfig) -> None:
        self.scheduler_config = scheduler_config
        self.cache_config = cache_config
        self.max_model_len = scheduler_config.max_model_len
        self.kv_cache_manager = KVCacheManager(cache_config)
        self.requests: dict[str, Request] = {}
        self.waiting = create_request_queue(scheduler_config.policy)
        self.running: list[Request] = []
        self._finished_since_schedule: list[str] = []
        # vLLM's watermark counts its null block among the blocks: num_blocks + 1.
        self._watermark_blocks = int(scheduler_config.watermark * (cache_config.num_blocks + 1))
        # prefill_schedule_interval's state, as vLLM keeps it: executed (non-empty) steps,
        # the last one that carried prefill (a full interval back: the first step is never
        # held), and whether the last release left requests waiting.
        self._num_executed_steps = 0
        self._last_prefill_step = -scheduler_config.prefill_schedule_interval
        self._prefill_capacity_bound = False

    # -- requests ---------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a request (in ``policy``'s order). Rejects what could never run, instead
        of hanging."""
        self.check_request(request)
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def check_request(self, request: Request) -> None:
        """``add_request``'s checks alone: a ``ValueError`` for a duplicate id, a prompt of
        ``max_model_len`` tokens or more, or a request the whole cache could not hold."""
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in the scheduler (duplicate)")
        if request.num_prompt_tokens >= self.max_model_len:
            raise ValueError(
                f"prompt of request {rid!r} has {request.num_prompt_tokens} tokens; allowed: "
                f"1 to max_model_len - 1 = {self.max_model_len - 1}"
            )
        # KV slots it can ever hold: every token but the last sampled one (never fed back),
        # and at most max_model_len - 1 positions.
        full_len = min(request.num_prompt_tokens + request.max_tokens - 1, self.max_model_len - 1)
        need = self.kv_cache_manager.num_blocks_needed(full_len)
        if need > self.cache_config.num_blocks:
            raise ValueError(
                f"request {rid!r} needs {need} KV blocks ({full_len} tokens at block_size "
                f"{self.cache_config.block_size}) but num_blocks is "
                f"{self.cache_config.num_blocks}: the cache is too small for one request"
            )

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def get_num_unfinished_requests(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- one step ---------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Fill this step's token budget: running requests first, then waiting ones, in
        the order ``SchedulerConfig.batching`` says (the default: vLLM V1's)."""
        cfg = self.scheduler_config
        step = _StepState(token_budget=cfg.max_num_batched_tokens)
        threshold = self._long_prefill_threshold()
        whole_only = not cfg.enable_chunked_prefill
        if cfg.batching == "prefill_first":
            # Whole new prompts first; decodes only in steps that admitted no prompt: every
            # decode stalls while a prompt is prefilled.
            self._schedule_waiting(step, threshold, whole_only=True)
            if not step.num_scheduled:
                self._schedule_running(step, threshold)
        elif cfg.batching == "prefill_or_decode":
            # Prefill work (running prompts' chunks, then admissions) if there is any that
            # can run; else the decodes. Never both in one step.
            self._schedule_running(step, threshold, only_prefill_chunks=True)
            if not step.preempted:
                self._schedule_waiting(step, threshold, whole_only)
            if not step.num_scheduled:
                self._schedule_running(step, threshold, only_prefill_chunks=False)
        else:
            defer = self._defer_prefills()
            self._schedule_running(step, threshold, skip_prefill_chunks=defer)
            if not step.preempted:  # the waiting pass is skipped after a preemption
                self._schedule_waiting(step, threshold, whole_only, defer)
                if not defer:  # vLLM's capacity escape: a release that left requests waiting
                    self._prefill_capacity_bound = bool(self.waiting)
            if step.num_scheduled:
                self._num_executed_steps += 1
            if step.carried_prefill:
                self._last_prefill_step = self._num_executed_steps
        return self._finish_schedule(step)

    def _long_prefill_threshold(self) -> int:
        """The threshold stops one long prefill from starving the others; a lone request
        has no one to starve, so it is never capped. Adaptive: never below a fair share
        of the budget, ``max_num_batched_tokens // (running + waiting)``."""
        cfg = self.scheduler_config
        num_requests = len(self.running) + len(self.waiting)
        threshold = cfg.long_prefill_token_threshold if num_requests > 1 else 0
        if threshold and cfg.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, cfg.max_num_batched_tokens // num_requests)
        return threshold

    def _defer_prefills(self) -> bool:
        """``prefill_schedule_interval`` (vLLM's local cadence): hold all prefill this step
        if fewer than N executed steps have passed since the last one that carried prefill,
        while something is decoding and the last release drained the waiting queue."""
        interval = self.scheduler_config.prefill_schedule_interval
        return (interval > 1 and not self._prefill_capacity_bound
                and self._num_executed_steps + 1 - self._last_prefill_step < interval
                and any(not r.is_prefill_chunk for r in self.running))

    def _schedule_running(self, step: _StepState, threshold: int,
                          skip_prefill_chunks: bool = False,
                          only_prefill_chunks: bool | None = None) -> None:
        """Pass 1: running requests in admission order; on KV shortage preempt the newest
        (FCFS) or the one with the largest ``(priority, arrival_time)`` ("priority").
        ``skip_prefill_chunks``: leave prompt chunks for a later step (held prefill);
        ``only_prefill_chunks``: serve only prompt chunks (True) or only decodes (False)."""
        running, allocate_slots = self.running, self.kv_cache_manager.allocate_slots
        by_priority = self.scheduler_config.policy == "priority"
        last_position = self.max_model_len - 1  # the last position that gets a KV slot
        req_index = 0
        while req_index < len(running) and step.token_budget > 0:
            request = running[req_index]
            if (skip_prefill_chunks and request.is_prefill_chunk) or (
                    only_prefill_chunks is not None
                    and request.is_prefill_chunk is not only_prefill_chunks):
                req_index += 1
                continue
            n = request.num_owed_tokens
            if 0 < threshold < n:
                n = threshold
            n = min(n, step.token_budget, last_position - request.num_computed_tokens)
            if n <= 0:
                req_index += 1
                continue
            preempted_self = False
            while allocate_slots(request, n) is None:
                # Out of KV blocks: preempt a victim (it recomputes later) and retry.
                if by_priority:
                    victim = max(running, key=_priority_order)  # the first of equals
                    victim_index = running.index(victim)
                    del running[victim_index]
                    if victim_index < req_index:
                        req_index -= 1
                    step.remove(victim)  # its tokens this step, if any, go back
                else:
                    victim = running.pop()
                self._preempt(victim)
                step.preempted.append(victim.request_id)
                if victim is request:
                    preempted_self = True
                    break
            if preempted_self:
                if by_priority:
                    continue  # those after it rank higher and may still fit
                return  # it was the newest: nothing after it can run either
            step.carried_prefill |= request.is_prefill_chunk
            step.add(request, n)
            req_index += 1

    def _schedule_waiting(self, step: _StepState, threshold: int, whole_only: bool,
                          defer: bool = False) -> None:
        """Pass 2: waiting requests in queue order, while budget and seats remain.
        ``whole_only`` (chunking off): a head request that does not fit stops the pass
        (head-of-line). ``defer`` (held prefill): only a request with at most one token
        to compute may start."""
        cfg, kv, waiting = self.scheduler_config, self.kv_cache_manager, self.waiting
        max_active = cfg.max_num_active_reqs
        while waiting and step.token_budget > 0:
            if len(self.running) >= max_active:
                break
            request = waiting.peek_request()
            is_prefill = request.num_computed_tokens < request.num_tokens - 1
            if defer and is_prefill:
                break
            # Prefix caching: cached leading blocks count as computed before the budget,
            # the threshold and the no-chunking rule see the tokens still owed.
            hit_blocks, num_hit = kv.get_computed_blocks(request)
            n = request.num_owed_tokens - num_hit
            if 0 < threshold < n:
                n = threshold
            if whole_only and n > step.token_budget:
                break
            n = min(n, step.token_budget)
            # The watermark is kept free only while others run (vLLM's has_scheduled_reqs).
            reserve = self._watermark_blocks if self.running else 0
            if cfg.scheduler_reserve_full_isl and not kv.can_fit_full_sequence(
                    request, hit_blocks, reserve=reserve):
                break
            if reserve and (kv.num_new_blocks(request, n, hit_blocks) + reserve
                            > kv.num_free_blocks):
                break
            if kv.allocate_slots(request, n, hit_blocks) is None:
                break
            if kv.enable_caching:
                kv.record_prefix_cache_stats(request, num_hit)
                request.num_computed_tokens += num_hit
                if request.num_preemptions == 0:
                    request.num_cached_tokens = num_hit
                step.cached[request.request_id] = num_hit
            waiting.pop_request()
            self.running.append(request)
            rid = request.request_id
            resumed = request.status == RequestStatus.PREEMPTED
            (step.resumed_ids if resumed else step.new_ids).append(rid)
            request.status = RequestStatus.RUNNING
            step.carried_prefill |= is_prefill
            step.add(request, n)

    def _finish_schedule(self, step: _StepState) -> SchedulerOutput:
        """Advance ``num_computed_tokens`` now, so the next schedule() sees the new state."""
        num_prefill = num_decode = 0
        tables = self.kv_cache_manager.block_tables
        for request, n in zip(step.requests, step.num_scheduled.values(), strict=True):
            c = request.num_computed_tokens
            # Positions before prefill_end are prompt (or recomputed) work; after: decode.
            prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
            decode = max(0, c + n - max(c, prefill_end))
            num_decode += decode
            num_prefill += n - decode
            request.num_computed_tokens = c + n
            request.is_prefill_chunk = c + n < request.num_tokens
        out = SchedulerOutput(
            num_scheduled_tokens=step.num_scheduled,
            num_computed_tokens=step.start,
            block_tables={rid: tables[rid] for rid in step.num_scheduled},
            scheduled_new_req_ids=step.new_ids,
            scheduled_resumed_req_ids=step.resumed_ids,
            preempted_req_ids=step.preempted,
            finished_req_ids=self._finished_since_schedule,
            num_prefill_tokens=num_prefill,
            num_decode_tokens=num_decode,
            num_cached_tokens=step.cached,
        )
        self._finished_since_schedule = []
        return out

    def _preempt(self, request: Request) -> None:
        """Free all of a request's KV and send it to the front of the queue; when it
        returns it recomputes prompt + outputs (vLLM V1 preempts by recomputation)."""
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    # -- after the model ran ----------------------------------------------------------
    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled_token_ids: dict[str, int]
    ) -> list[str]:
        """Append each sampled token and finish requests that are done; returns the ids
        finished by this step. Exactly the scheduled requests with nothing left owed
        sample; a mid-prefill chunk samples nothing."""
        expected = []  # the requests that owe nothing now, in scheduling order
        for rid in scheduler_output.num_scheduled_tokens:
            request = self.requests[rid]
            if request.num_owed_tokens == 0:
                expected.append(request)
        if len(sampled_token_ids) != len(expected) or any(
                r.request_id not in sampled_token_ids for r in expected):
            raise ValueError(
                f"sampled_token_ids must hold exactly the requests that completed their "
                f"owed tokens this step: expected {sorted(r.request_id for r in expected)}, got "
                f"{sorted(sampled_token_ids)}"
            )
        finished: list[str] = []
        for request in expected:
            token = sampled_token_ids[request.request_id]
            request.append_output_token(token)
            if self._check_stop(request, token):
                finished.append(request.request_id)
        if finished:  # one pass, not an O(running) remove per finished request
            self.running = [r for r in self.running if not r.is_finished]
        self._finished_since_schedule.extend(finished)
        return finished

    def _check_stop(self, request: Request, token: int) -> bool:
        """After ``token`` was appended: finish ``request`` (free its KV) if it is done."""
        if token == request.eos_token_id:
            request.status = RequestStatus.FINISHED_STOPPED
        elif (request.num_tokens >= self.max_model_len
              or request.num_output_tokens >= request.max_tokens):
            request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        else:
            return False
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]
        return True

    # -- for a driver that applies decode steps itself (sim.fast_forward) -------------
    def stop_requests(self, requests: list[Request]) -> None:
        """Finish ``requests``, in this order, whose last output token was appended outside
        ``update_from_output`` (the simulator's bulk decode steps): each must be done by
        ``_check_stop``'s rules. Their KV is freed and the next ``schedule()`` reports them
        in ``finished_req_ids``, after any finished earlier."""
        for request in requests:
            if not self._check_stop(request, request.output_token_ids[-1]):
                raise ValueError(f"request {request.request_id!r} is not done: it has "
                                 f"{request.num_output_tokens} of {request.max_tokens} tokens")
        if requests:
            self.running = [r for r in self.running if not r.is_finished]
            self._finished_since_schedule.extend(r.request_id for r in requests)

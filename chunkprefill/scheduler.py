"""vLLM V1's unified token-budget scheduler (synchronous, FCFS), small enough to read.

There is no prefill phase and no decode phase. Each step hands out at most
``max_num_batched_tokens`` tokens as a ``{request_id: num_tokens}`` dict: running requests
first (in admission order), then waiting ones. A long prompt simply owes many tokens and
receives whatever budget is left, one chunk per step: that is chunked prefill. Its KV
stays in its blocks, so the next chunk reads it instead of recomputing it.
Imports no torch: the same object drives the toy model and the cost-model simulator."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.kv_cache import KVCacheManager
from chunkprefill.request import Request, RequestStatus


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

    def add(self, request: Request, n: int) -> None:
        self.num_scheduled[request.request_id] = n
        self.start[request.request_id] = request.num_computed_tokens
        self.requests.append(request)
        self.token_budget -= n


class Scheduler:
    """Decides, each step, how many tokens each request runs (DESIGN.md section 4)."""

    def __init__(self, scheduler_config: SchedulerConfig, cache_config: CacheConfig) -> None:
        self.scheduler_config = scheduler_config
        self.cache_config = cache_config
        self.max_model_len = scheduler_config.max_model_len
        self.kv_cache_manager = KVCacheManager(cache_config)
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._finished_since_schedule: list[str] = []

    # -- requests ---------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a request (FCFS). Rejects what could never run, instead of hanging."""
        self.check_request(request)
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.append(request)

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
        """Fill this step's token budget: running requests first, then waiting (FCFS)."""
        cfg = self.scheduler_config
        step = _StepState(token_budget=cfg.max_num_batched_tokens)
        if cfg.policy == "prefill_first":
            # vLLM V0 / nano-vllm baseline: whole new prompts first; decodes only in steps
            # that admitted no prompt. Every decode stalls while a prompt is prefilled.
            self._schedule_waiting(step, threshold=0, whole_only=True)
            if not step.num_scheduled:
                self._schedule_running(step, threshold=0)
            return self._finish_schedule(step)
        # The threshold stops one long prefill from starving the others; a lone
        # request has no one to starve, so it is never capped.
        num_requests = len(self.running) + len(self.waiting)
        threshold = cfg.long_prefill_token_threshold if num_requests > 1 else 0
        self._schedule_running(step, threshold)
        if not step.preempted:  # the waiting pass is skipped after a preemption
            self._schedule_waiting(step, threshold, not cfg.enable_chunked_prefill)
        return self._finish_schedule(step)

    def _schedule_running(self, step: _StepState, threshold: int) -> None:
        """Pass 1: running requests in admission order; preempt the newest on KV shortage."""
        running, allocate_slots = self.running, self.kv_cache_manager.allocate_slots
        last_position = self.max_model_len - 1  # the last position that gets a KV slot
        req_index = 0
        while req_index < len(running) and step.token_budget > 0:
            request = running[req_index]
            n = request.num_owed_tokens
            if 0 < threshold < n:
                n = threshold
            n = min(n, step.token_budget, last_position - request.num_computed_tokens)
            if n <= 0:
                req_index += 1
                continue
            while allocate_slots(request, n) is None:
                # Out of KV blocks: preempt the last running request (recompute later).
                victim = running.pop()
                self._preempt(victim)
                step.preempted.append(victim.request_id)
                if victim is request:
                    return  # it preempted itself: nothing after it can run either
            step.add(request, n)
            req_index += 1

    def _schedule_waiting(self, step: _StepState, threshold: int, whole_only: bool) -> None:
        """Pass 2: waiting requests, FCFS, while budget and seats remain. ``whole_only``
        (chunking off): a head request that does not fit stops the pass (head-of-line)."""
        while self.waiting and step.token_budget > 0:
            if len(self.running) >= self.scheduler_config.max_num_seqs:
                break
            request = self.waiting[0]
            n = request.num_owed_tokens
            if 0 < threshold < n:
                n = threshold
            if whole_only and n > step.token_budget:
                break
            n = min(n, step.token_budget)
            if not self.kv_cache_manager.can_fit_full_sequence(request):
                break
            if self.kv_cache_manager.allocate_slots(request, n) is None:
                break
            self.waiting.popleft()
            self.running.append(request)
            rid = request.request_id
            resumed = request.status == RequestStatus.PREEMPTED
            (step.resumed_ids if resumed else step.new_ids).append(rid)
            request.status = RequestStatus.RUNNING
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
        self.waiting.appendleft(request)

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

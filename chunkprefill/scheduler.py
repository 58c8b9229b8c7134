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
    step; ``block_tables[r]`` is a snapshot covering them. ``finished_req_ids`` are the
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
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in the scheduler (duplicate)")
        if request.num_prompt_tokens >= self.max_model_len:
            raise ValueError(
                f"prompt of request {rid!r} has {request.num_prompt_tokens} tokens; allowed: "
                f"1 to max_model_len - 1 = {self.max_model_len - 1}"
            )
        full_len = min(request.num_prompt_tokens + request.max_tokens, self.max_model_len)
        need = self.kv_cache_manager.num_blocks_needed(full_len)
        if need > self.cache_config.num_blocks:
            raise ValueError(
                f"request {rid!r} needs {need} KV blocks ({full_len} tokens at block_size "
                f"{self.cache_config.block_size}) but num_blocks is "
                f"{self.cache_config.num_blocks}: the cache is too small for one request"
            )
        request.status = RequestStatus.WAITING
        self.requests[rid] = request
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def get_num_unfinished_requests(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- one step ---------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Fill this step's token budget: running requests first, then waiting (FCFS)."""
        cfg = self.scheduler_config
        token_budget = cfg.max_num_batched_tokens
        num_scheduled: dict[str, int] = {}
        new_ids: list[str] = []
        resumed_ids: list[str] = []
        preempted: list[Request] = []
        start: dict[str, int] = {}
        # The threshold stops one long prefill from starving the others; a lone
        # request has no one to starve, so it is never capped.
        threshold = cfg.long_prefill_token_threshold if len(self.running) + len(
            self.waiting) > 1 else 0

        # 1. Running requests, in admission order.
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            n = request.num_owed_tokens
            if 0 < threshold < n:
                n = threshold
            n = min(n, token_budget, self.max_model_len - 1 - request.num_computed_tokens)
            if n <= 0:
                req_index += 1
                continue
            while True:
                if self.kv_cache_manager.allocate_slots(request, n) is not None:
                    break
                # Out of KV blocks: preempt the newest running request (recompute later).
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if request.status == RequestStatus.PREEMPTED:
                break
            num_scheduled[request.request_id] = n
            start[request.request_id] = request.num_computed_tokens
            token_budget -= n
            req_index += 1

        # 2. Waiting requests, FCFS; skipped entirely if this step had to preempt.
        if not preempted:
            while self.waiting and token_budget > 0:
                if len(self.running) >= cfg.max_num_seqs:
                    break
                request = self.waiting[0]
                n = request.num_owed_tokens
                if 0 < threshold < n:
                    n = threshold
                if not cfg.enable_chunked_prefill and n > token_budget:
                    break  # head-of-line blocking: whole prompts only
                n = min(n, token_budget)
                if not self.kv_cache_manager.can_fit_full_sequence(request):
                    break
                if self.kv_cache_manager.allocate_slots(request, n) is None:
                    break
                self.waiting.popleft()
                self.running.append(request)
                rid = request.request_id
                (resumed_ids if request.status == RequestStatus.PREEMPTED else new_ids).append(rid)
                request.status = RequestStatus.RUNNING
                num_scheduled[rid] = n
                start[rid] = request.num_computed_tokens
                token_budget -= n

        # 3. Advance num_computed_tokens now, so the next schedule() sees the new state.
        num_prefill = num_decode = 0
        for rid, n in num_scheduled.items():
            request = self.requests[rid]
            c = request.num_computed_tokens
            prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
            num_decode += max(0, c + n - max(c, prefill_end))
            num_prefill += n - max(0, c + n - max(c, prefill_end))
            request.num_computed_tokens = c + n

        out = SchedulerOutput(
            num_scheduled_tokens=num_scheduled,
            num_computed_tokens=start,
            block_tables={rid: list(self.kv_cache_manager.get_block_table(rid))
                          for rid in num_scheduled},
            scheduled_new_req_ids=new_ids,
            scheduled_resumed_req_ids=resumed_ids,
            preempted_req_ids=[r.request_id for r in preempted],
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
        expected = [rid for rid in scheduler_output.num_scheduled_tokens
                    if self.requests[rid].num_owed_tokens == 0]
        if set(sampled_token_ids) != set(expected):
            raise ValueError(
                f"sampled_token_ids must hold exactly the requests that completed their "
                f"owed tokens this step: expected {sorted(expected)}, got "
                f"{sorted(sampled_token_ids)}"
            )
        finished: list[str] = []
        for rid in expected:
            request = self.requests[rid]
            token = sampled_token_ids[rid]
            request.output_token_ids.append(token)
            if token == request.eos_token_id:
                request.status = RequestStatus.FINISHED_STOPPED
            elif (request.num_tokens >= self.max_model_len
                  or request.num_output_tokens >= request.max_tokens):
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
            else:
                continue
            self.running.remove(request)
            self.kv_cache_manager.free(request)
            del self.requests[rid]
            finished.append(rid)
        self._finished_since_schedule.extend(finished)
        return finished

"""vLLM V1's unified token-budget scheduler (synchronous), small enough to read.

No prefill phase, no decode phase: each step hands out at most ``max_num_batched_tokens``
tokens as a ``{request_id: num_tokens}`` dict, running requests first (in admission order),
then waiting ones. A long prompt owes many tokens and gets whatever budget is left, one
chunk per step: that is chunked prefill. Its KV stays in its blocks, so the next chunk reads
it instead of recomputing it. No torch: it drives the toy model and the simulator alike."""

from __future__ import annotations

from typing import Literal

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.kv_cache import KVCacheManager
from chunkprefill.request import Request, RequestStatus
from chunkprefill.request_queue import create_request_queue
from chunkprefill.scheduler_output import SchedulerOutput, StepDraft, TokenSplit

Serve = Literal["all", "prefill", "decode"]  # which running requests a pass serves


class Scheduler:
    """Decides, each step, how many tokens each request runs: vLLM 0.33.0's rules."""

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
        # One method per batching style: _schedule_mixed (vLLM's), _schedule_prefill_or_decode
        # and _schedule_prefill_first (other engines' styles, for comparison).
        self._schedule_style = getattr(self, f"_schedule_{scheduler_config.batching}")

    # -- requests ---------------------------------------------------------------------
    def add_request(self, request: Request) -> None:  # in policy's order, checked first
        self.check_request(request)
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def check_request(self, request: Request) -> None:
        """A ``ValueError`` for what could never run (instead of a hang): a duplicate id,
        a prompt of ``max_model_len`` tokens or more, or more KV than the whole cache."""
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in the scheduler (duplicate)")
        if request.num_prompt_tokens >= self.max_model_len:
            raise ValueError(f"prompt of request {rid!r} has {request.num_prompt_tokens} "
                             f"tokens; allowed: 1 to max_model_len - 1 = {self.max_model_len - 1}")
        # KV slots it can ever hold: every token but the last sampled one (never fed back),
        # and at most max_model_len - 1 positions.
        full_len = min(request.num_prompt_tokens + request.max_tokens - 1, self.max_model_len - 1)
        need = self.kv_cache_manager.num_blocks_needed(full_len)
        if need > self.cache_config.num_blocks:
            raise ValueError(
                f"request {rid!r} needs {need} KV blocks ({full_len} tokens at block_size "
                f"{self.cache_config.block_size}) but num_blocks is "
                f"{self.cache_config.num_blocks}: the cache is too small for one request")

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    # -- one step ---------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Fill this step's token budget in the order ``SchedulerConfig.batching`` says."""
        step = StepDraft(token_budget=self.scheduler_config.max_num_batched_tokens)
        self._schedule_style(step, self._long_prefill_threshold())
        return self._finish_schedule(step)

    def _schedule_mixed(self, step: StepDraft, threshold: int) -> None:
        """vLLM V1: running requests (decodes and prompt chunks) first, then new prompts
        fill the budget that is left, unless a preemption happened this step."""
        defer, whole_only = self._defer_prefills(), not self.scheduler_config.enable_chunked_prefill
        self._schedule_running(step, threshold, "decode" if defer else "all")
        if not step.preempted:
            self._schedule_waiting(step, threshold, whole_only, defer)
            if not defer:  # vLLM's capacity escape: a release that left requests waiting
                self._prefill_capacity_bound = bool(self.waiting)
        if step.num_scheduled:
            self._num_executed_steps += 1
        if step.carried_prefill:
            self._last_prefill_step = self._num_executed_steps

    def _schedule_prefill_or_decode(self, step: StepDraft, threshold: int) -> None:
        """Prefill work (running prompts' chunks, then admissions) if any can run; else
        the decodes. Never both in one step (SGLang without mixed chunks)."""
        self._schedule_running(step, threshold, "prefill")
        if not step.preempted:
            self._schedule_waiting(step, threshold, not self.scheduler_config
                                   .enable_chunked_prefill)
        if not step.num_scheduled:
            self._schedule_running(step, threshold, "decode")

    def _schedule_prefill_first(self, step: StepDraft, threshold: int) -> None:
        """Whole new prompts first; decodes only in steps that admitted none, so every
        decode stalls while a prompt is prefilled (vLLM's early scheduler with chunking off)."""
        self._schedule_waiting(step, threshold, whole_only=True)
        if not step.num_scheduled:
            self._schedule_running(step, threshold, "all")

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

    def _schedule_running(self, step: StepDraft, threshold: int, serve: Serve) -> None:
        """Pass 1: running requests in admission order (``serve``: all of them, or only
        prompt chunks, or only decodes). Out of KV blocks: preempt ``_pick_victim``'s
        choice and retry."""
        running, allocate_slots = self.running, self.kv_cache_manager.allocate_slots
        last_position = self.max_model_len - 1  # the last position that gets a KV slot
        req_index = 0
        while req_index < len(running) and step.token_budget > 0:
            request = running[req_index]
            if serve != "all" and request.is_prefill_chunk is not (serve == "prefill"):
                req_index += 1
                continue
            # Chunked prefill: what it owes, capped by the threshold and the budget left.
            n = request.num_owed_tokens
            if 0 < threshold < n:
                n = threshold
            n = min(n, step.token_budget, last_position - request.num_computed_tokens)
            if n <= 0:
                req_index += 1
                continue
            while allocate_slots(request, n) is None:  # out of KV blocks
                victim, req_index = self._pick_victim(req_index)
                step.remove(victim)  # its tokens this step, if any, go back
                self._preempt(victim)
                step.preempted.append(victim.request_id)
                if victim is request:
                    break
            else:
                step.carried_prefill |= request.is_prefill_chunk
                step.add(request, n)
                req_index += 1
                continue
            if self.scheduler_config.policy != "priority":
                return  # it preempted itself, the newest: nothing after it can run either
            # priority: those after it rank higher and may still fit

    def _pick_victim(self, req_index: int) -> tuple[Request, int]:
        """Take the preemption victim out of ``running``: the newest (FCFS) or the one
        with the largest ``(priority, arrival_time)`` (the first of equals). Returns it
        and ``req_index`` moved back if the victim ran before it."""
        if self.scheduler_config.policy != "priority":
            return self.running.pop(), req_index
        victim = max(self.running, key=lambda r: (r.priority, r.arrival_time))
        at = self.running.index(victim)
        del self.running[at]
        return victim, req_index - (at < req_index)

    def _schedule_waiting(self, step: StepDraft, threshold: int, whole_only: bool,
                          defer: bool = False) -> None:
        """Pass 2: waiting requests in queue order, while budget and seats remain. A prefix-
        cache hit counts as computed before anything else is decided. ``whole_only``
        (chunking off): a head request that does not fit stops the pass (head-of-line).
        ``defer`` (held prefill): only a request with at most one token left may start."""
        cfg, kv, waiting = self.scheduler_config, self.kv_cache_manager, self.waiting
        while waiting and step.token_budget > 0 and len(self.running) < cfg.max_num_active_reqs:
            request = waiting.peek_request()
            hit_blocks, num_hit = kv.get_computed_blocks(request)
            is_prefill = request.num_computed_tokens + num_hit < request.num_tokens - 1
            if defer and is_prefill:
                break
            n = request.num_owed_tokens - num_hit
            if 0 < threshold < n:
                n = threshold
            if whole_only and n > step.token_budget:
                break
            n = min(n, step.token_budget)
            # The watermark is kept free only while others run (vLLM's has_scheduled_reqs).
            if kv.allocate_slots(request, n, hit_blocks,
                                 full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                                 watermark_blocks=self._watermark_blocks if self.running else 0
                                 ) is None:
                break
            if kv.enable_caching:
                kv.record_prefix_cache_stats(request, num_hit)
                request.num_computed_tokens += num_hit
                if request.num_preemptions == 0:
                    request.num_cached_tokens = num_hit
                step.num_cached[request.request_id] = num_hit
            waiting.pop_request()
            self.running.append(request)
            resumed = request.status == RequestStatus.PREEMPTED
            (step.resumed_ids if resumed else step.new_ids).append(request.request_id)
            request.status = RequestStatus.RUNNING
            step.carried_prefill |= is_prefill
            step.add(request, n)

    def _finish_schedule(self, step: StepDraft) -> SchedulerOutput:
        """Advance ``num_computed_tokens`` now, so the next schedule() sees the new state,
        and say what each request's tokens compute."""
        splits = {}
        for request, n in zip(step.requests, step.num_scheduled.values(), strict=True):
            c = request.num_computed_tokens
            # Positions before prefill_end are prompt (or recomputed) work; after: decode.
            prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
            decode = max(0, c + n - max(c, prefill_end))
            recompute = min(max(0, min(c + n, request.num_computed_before_preemption) - c),
                            n - decode)
            splits[request.request_id] = TokenSplit(n - decode - recompute, decode, recompute)
            request.num_computed_tokens = c + n
            request.is_prefill_chunk = c + n < request.num_tokens
        tables = self.kv_cache_manager.block_tables
        out = SchedulerOutput(step.num_scheduled, step.num_computed,
                              {rid: tables[rid] for rid in step.num_scheduled}, splits,
                              step.new_ids, step.resumed_ids, step.preempted,
                              self._finished_since_schedule, step.num_cached)
        self._finished_since_schedule = []
        return out

    def _preempt(self, request: Request) -> None:
        """Free all of a request's KV and send it to the front of the queue; when it
        returns it recomputes prompt + outputs (vLLM V1 preempts by recomputation)."""
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_before_preemption = max(request.num_computed_before_preemption,
                                                     request.num_computed_tokens)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    # -- after the model ran ----------------------------------------------------------
    def update_from_output(self, scheduler_output: SchedulerOutput,
                           sampled_token_ids: dict[str, int]) -> list[str]:
        """Append each sampled token and finish requests that are done; returns the ids
        finished by this step. Exactly the scheduled requests with nothing left owed
        sample; a mid-prefill chunk samples nothing."""
        expected = [self.requests[rid] for rid in scheduler_output.num_scheduled_tokens
                    if self.requests[rid].num_owed_tokens == 0]
        if len(sampled_token_ids) != len(expected) or any(
                r.request_id not in sampled_token_ids for r in expected):
            raise ValueError(
                f"sampled_token_ids must hold exactly the requests that completed their "
                f"owed tokens this step: expected {sorted(r.request_id for r in expected)}, got "
                f"{sorted(sampled_token_ids)}")
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

    def stop_requests(self, requests: list[Request]) -> None:
        """For ``fast_forward``, which appends decode tokens itself: finish ``requests`` (in
        this order), each done by ``_check_stop``'s rules; the next ``schedule()`` reports
        them in ``finished_req_ids``, after any finished earlier."""
        for request in requests:
            if not self._check_stop(request, request.output_token_ids[-1]):
                raise ValueError(f"request {request.request_id!r} is not done: it has "
                                 f"{request.num_output_tokens} of {request.max_tokens} tokens")
        if requests:
            self.running = [r for r in self.running if not r.is_finished]
            self._finished_since_schedule.extend(r.request_id for r in requests)

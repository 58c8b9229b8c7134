"""What one ``schedule()`` call hands the model: vLLM's ``SchedulerOutput``
(``vllm/v1/core/sched/output.py``), with the facts the scheduler already knows kept per
request, so nothing downstream has to replay the step history to recover them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from chunkprefill.request import Request


class TokenSplit(NamedTuple):
    """One request's tokens in one step, by what they compute: ``prefill`` (prompt tokens
    never computed before), ``decode`` (the fed-back sampled token) and ``recompute``
    (tokens computed once already, re-run because a preemption freed their KV)."""

    prefill: int
    decode: int
    recompute: int = 0

    @property
    def total(self) -> int:
        return self.prefill + self.decode + self.recompute

    @property
    def kind(self) -> str:
        """``"recompute"`` if any token is re-run, else ``"prefill"`` or ``"decode"``."""
        return "recompute" if self.recompute else "prefill" if self.prefill else "decode"


@dataclass
class SchedulerOutput:
    """One step's work, in scheduling order (running requests first). Per scheduled
    request: ``num_computed_tokens`` (where its tokens start: vLLM's meaning),
    ``token_splits`` (prefill / decode / recompute) and ``block_tables`` (the live table:
    tables only grow at the end, so entries for this step's tokens stay valid);
    ``num_cached_tokens``: the prefix-cache hit of each request admitted this step
    (counted in ``num_computed_tokens``, not scheduled). ``finished_req_ids`` are the
    requests that finished since the previous ``schedule()`` (vLLM's meaning)."""

    num_scheduled_tokens: dict[str, int]
    num_computed_tokens: dict[str, int]
    block_tables: dict[str, list[int]]
    token_splits: dict[str, TokenSplit] = field(default_factory=dict)
    scheduled_new_req_ids: list[str] = field(default_factory=list)
    scheduled_resumed_req_ids: list[str] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    finished_req_ids: list[str] = field(default_factory=list)
    num_cached_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def num_prefill_tokens(self) -> int:
        """Prompt work this step, recomputation included: everything but decodes."""
        return sum(s.prefill + s.recompute for s in self.token_splits.values())

    @property
    def num_decode_tokens(self) -> int:
        return sum(s.decode for s in self.token_splits.values())

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


@dataclass
class StepDraft:
    """What one ``schedule()`` call has decided so far: the output being assembled."""

    token_budget: int
    num_scheduled: dict[str, int] = field(default_factory=dict)
    num_computed: dict[str, int] = field(default_factory=dict)  # where each one starts
    requests: list[Request] = field(default_factory=list)  # scheduled, in order
    new_ids: list[str] = field(default_factory=list)
    resumed_ids: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    num_cached: dict[str, int] = field(default_factory=dict)  # prefix-cache hits
    carried_prefill: bool = False  # a prompt chunk ran or a prompt was admitted

    def add(self, request: Request, n: int) -> None:  # n tokens for request this step
        self.num_scheduled[request.request_id] = n
        self.num_computed[request.request_id] = request.num_computed_tokens
        self.requests.append(request)
        self.token_budget -= n

    def remove(self, request: Request) -> None:
        """Undo ``add`` for a request preempted later in the same step (policy
        "priority" may preempt one already scheduled): its budget comes back."""
        n = self.num_scheduled.pop(request.request_id, None)
        if n is not None:
            del self.num_computed[request.request_id]
            self.requests.remove(request)
            self.token_budget += n

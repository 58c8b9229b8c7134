"""A request's scheduling state. Like vLLM V1 there is no prefill or decode *phase*: a
request owes ``num_tokens - num_computed_tokens`` tokens (prompt + outputs not yet run
through the model), and the scheduler hands out some of them each step."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from chunkprefill.checks import check_int, check_priority


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"  # sampled eos_token_id
    FINISHED_LENGTH_CAPPED = "finished_length_capped"  # max_tokens or max_model_len

    @property
    def is_finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


@dataclass
class SamplingParams:
    """Greedy when ``temperature == 0``; else softmax sampling seeded by ``seed``."""

    max_tokens: int = 16
    temperature: float = 0.0
    seed: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, 1)
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")


@dataclass(eq=False, slots=True)
class Request:
    """One generation request. ``eq=False``: requests compare by identity, as the
    scheduler's queues need."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int = 16
    arrival_time: float = 0.0
    eos_token_id: int | None = None
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    sampling_params: SamplingParams | None = None
    priority: int = 0  # vLLM's: lower is served first with policy="priority"
    num_tokens: int = field(init=False, default=0)
    # vLLM's flag: this request's last scheduled chunk left prompt (or recomputation)
    # tokens owed. It tells a prefill chunk from a decode when prefill_schedule_interval
    # holds prefill back, and when batching keeps prefills and decodes apart.
    is_prefill_chunk: bool = field(init=False, default=False)
    # Prompt tokens served from the prefix cache at first admission (vLLM's name).
    num_cached_tokens: int = field(init=False, default=0)
    # The furthest num_computed_tokens got before a preemption threw its KV away: positions
    # below it are recomputed when the request returns (what TokenSplit.recompute counts).
    num_computed_before_preemption: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty string, got {self.request_id!r}")
        self.prompt_token_ids = list(self.prompt_token_ids)
        if not self.prompt_token_ids:
            raise ValueError(f"prompt_token_ids of request {self.request_id!r} must not be empty")
        check_int("max_tokens", self.max_tokens, 1)
        check_priority(self.priority)
        self.output_token_ids = list(self.output_token_ids)
        # Prompt + sampled outputs: what the KV cache must eventually hold.
        self.num_tokens = len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_owed_tokens(self) -> int:
        """Tokens not yet computed: the whole rest of the prompt, or 1 for a decode."""
        return self.num_tokens - self.num_computed_tokens

    def append_output_token(self, token_id: int) -> None:
        """Record a sampled token. ``num_tokens`` (prompt + outputs) is kept as a plain
        attribute because the scheduler reads it for every request every step."""
        self.output_token_ids.append(token_id)
        self.num_tokens += 1

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

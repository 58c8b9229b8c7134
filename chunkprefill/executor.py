"""Runs a scheduled step on the toy model: one forward call for the whole mixed batch.

The scheduler's ``{request_id: num_tokens}`` becomes one flattened batch of tokens
(prefill chunks and decodes side by side) with vLLM's metadata; each layer writes this
step's K/V through ``slot_mapping`` and attends over the paged cache, so a later chunk
reads the KV that earlier chunks left there. Only the last row of each request that
finishes its owed tokens goes through the LM head and is sampled.

Prefix caching needs nothing here: a hit raises ``num_computed_tokens`` and puts the cached
blocks at the front of the block table, so the batch simply starts after them (the cached
tokens go through no layer) and attention reads their KV like any earlier chunk's."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import torch

from chunkprefill.attention import BACKENDS, build_attention_metadata, default_backend
from chunkprefill.config import CacheConfig
from chunkprefill.request import Request
from chunkprefill.scheduler import SchedulerOutput


class ModelExecutor:
    """Owns the model, its paged KV tensors and the per-request samplers.

    ``prune_last_layer`` (default on): the last layer runs attention and MLP only for the rows
    that sample (``ToyTransformer.forward``'s ``logits_indices``); every row's K/V is still
    written in every layer, so later tokens see the same cache. vLLM computes every row
    through every layer and drops the unsampled ones only before the LM head; set it False
    to do the same (e.g. to read every position's hidden state through a forward hook)."""

    def __init__(self, model: Any, cache_config: CacheConfig, attention_backend: str | None,
                 device: Any = None, warmup: bool | None = None,
                 prune_last_layer: bool = True) -> None:
        self.model = model
        self.prune_last_layer = prune_last_layer
        self.device = torch.device(device) if device is not None else next(
            model.parameters()).device
        model.to(self.device)
        model.eval()
        backend = attention_backend or default_backend(self.device)
        if backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {backend!r}")
        self.attention_backend = backend
        self.block_size = cache_config.block_size
        # The cache holds what the layers write: K and V in the model's own dtype.
        self.kv_caches = model.allocate_kv_cache(cache_config.num_blocks, cache_config.block_size,
                                                 device=self.device,
                                                 dtype=next(model.parameters()).dtype)
        self._generators: dict[str, torch.Generator] = {}
        self._cuda = self.device.type == "cuda"
        self._events: tuple[Any, Any] | None = None  # CUDA events around the last forward
        if self._cuda if warmup is None else warmup:
            self.warm_up()

    def check_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        """Token ids must index the vocabulary (else the embedding lookup fails deep in torch,
        or with a device-side assert on a GPU). The boundary check: ``forward`` does not
        repeat it on a GPU (it would wait for the device every step)."""
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt_token_ids if not (isinstance(t, int) and 0 <= t < vocab)]
        if bad:
            raise ValueError(f"prompt token ids must be integers in [0, vocab_size={vocab}); "
                             f"got {bad[:5]}")

    @torch.inference_mode()
    def warm_up(self) -> None:
        """Run a decode-only and a mixed step untimed, then clear the caches: Triton compiles
        each kernel variant (decode tiles, prefill tiles, the K/V store) and cuBLAS picks its
        kernels on first use, which would otherwise land inside the first timed steps."""
        blocks = [0, 1]  # enough for both steps; zeroed afterwards
        for query_lens, computed in (([1], [0]), ([3, 1], [0, 1])):
            tables = [blocks] * len(query_lens)
            meta, positions = build_attention_metadata(query_lens, computed, tables,
                                                       self.block_size, self.device)
            ids = torch.zeros(meta.num_tokens, dtype=torch.long, device=self.device)
            hidden = self.model.forward(ids, positions, self.kv_caches, meta,
                                        backend=self.attention_backend)
            self.model.compute_logits(hidden[-1:]).argmax(-1).tolist()
        for k_cache, v_cache in self.kv_caches:
            k_cache.zero_()
            v_cache.zero_()
        self._events = None

    @property
    def last_forward_gpu_s(self) -> float | None:
        """GPU time of the last step's forward (CUDA events recorded on the stream just
        before and after it), or None off CUDA. The step's host time is longer whenever the
        host launches kernels slower than the GPU runs them: the gap is launch overhead
        (what CUDA graphs remove in real engines), not GPU work."""
        if self._events is None:
            return None
        start, end = self._events
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float | None]:
        for rid in out.finished_req_ids:  # their samplers are never needed again
            self._generators.pop(rid, None)
        rids = list(out.num_scheduled_tokens)
        query_lens = [out.num_scheduled_tokens[r] for r in rids]
        starts = [out.num_computed_tokens[r] for r in rids]
        input_ids: list[int] = []
        for rid, c, n in zip(rids, starts, query_lens, strict=True):
            input_ids += requests[rid].all_token_ids[c: c + n]
        meta, positions = build_attention_metadata(
            query_lens, starts, [out.block_tables[r] for r in rids], self.block_size, self.device)
        ids = torch.tensor(input_ids, device=self.device)
        # Rows that sample: the last token of each request with nothing left owed. Only their
        # hidden states are computed through the last layer (forward's logits_indices).
        ends = meta.query_start_loc_cpu
        sampling = [(rid, ends[b + 1] - 1) for b, rid in enumerate(rids)
                    if requests[rid].num_owed_tokens == 0]
        if self._cuda:  # on the stream, so they bracket the GPU's work, not the host's
            self._events = (torch.cuda.Event(enable_timing=True),
                            torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        rows = [row for _, row in sampling]
        hidden = self.model.forward(ids, positions, self.kv_caches, meta,
                                    backend=self.attention_backend,
                                    logits_indices=rows if self.prune_last_layer else None)
        if self._cuda:
            self._events[1].record()
        if not sampling:
            return {}, None
        if not self.prune_last_layer:
            hidden = hidden[rows]
        logits = self.model.compute_logits(hidden)  # (S, vocab)
        reqs = [requests[rid] for rid, _ in sampling]
        if not self._cuda:
            return {r.request_id: self._sample(r, logits[i]) for i, r in enumerate(reqs)}, None
        # On a GPU each int(argmax(row)) would wait for the device: one argmax for the batch,
        # one copy to the host; only temperature rows go to their samplers.
        greedy = logits.argmax(-1).tolist()
        return {r.request_id: greedy[i] if _temperature(r) == 0.0 else self._sample(r, logits[i])
                for i, r in enumerate(reqs)}, None

    def _sample(self, request: Request, logits: torch.Tensor) -> int:
        temperature = _temperature(request)
        if temperature == 0.0:
            return int(torch.argmax(logits))
        params = request.sampling_params
        gen = self._generators.get(request.request_id)
        if gen is None:
            seed = (params.seed or 0) * 1_000_003 + zlib.crc32(request.request_id.encode())
            gen = torch.Generator(device="cpu").manual_seed(seed)
            self._generators[request.request_id] = gen
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=gen))


def _temperature(request: Request) -> float:
    params = request.sampling_params
    return params.temperature if params is not None else 0.0

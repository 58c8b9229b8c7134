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
    """Owns the model, its paged KV tensors and the per-request samplers."""

    def __init__(self, model: Any, cache_config: CacheConfig, attention_backend: str | None,
                 device: Any = None) -> None:
        self.model = model
        self.device = torch.device(device) if device is not None else next(
            model.parameters()).device
        model.to(self.device)
        model.eval()
        backend = attention_backend or default_backend(self.device)
        if backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {backend!r}")
        self.attention_backend = backend
        self.block_size = cache_config.block_size
        self.kv_caches = model.allocate_kv_cache(cache_config.num_blocks, cache_config.block_size,
                                                 device=self.device)
        self._generators: dict[str, torch.Generator] = {}

    def check_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        """Token ids must index the vocabulary (else the embedding lookup fails deep in torch)."""
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt_token_ids if not (isinstance(t, int) and 0 <= t < vocab)]
        if bad:
            raise ValueError(f"prompt token ids must be integers in [0, vocab_size={vocab}); "
                             f"got {bad[:5]}")

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
        hidden = self.model.forward(torch.tensor(input_ids, device=self.device), positions,
                                    self.kv_caches, meta, backend=self.attention_backend)
        # Rows that sample: the last token of each request with nothing left owed.
        ends = meta.query_start_loc[1:].tolist()
        sampling = [(rid, ends[b] - 1) for b, rid in enumerate(rids)
                    if requests[rid].num_owed_tokens == 0]
        if not sampling:
            return {}, None
        logits = self.model.compute_logits(hidden[[row for _, row in sampling]])  # (S, vocab)
        return {rid: self._sample(requests[rid], logits[i])
                for i, (rid, _) in enumerate(sampling)}, None

    def _sample(self, request: Request, logits: torch.Tensor) -> int:
        params = request.sampling_params
        temperature = params.temperature if params is not None else 0.0
        if temperature == 0.0:
            return int(torch.argmax(logits))
        gen = self._generators.get(request.request_id)
        if gen is None:
            seed = (params.seed or 0) * 1_000_003 + zlib.crc32(request.request_id.encode())
            gen = torch.Generator(device="cpu").manual_seed(seed)
            self._generators[request.request_id] = gen
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=gen))

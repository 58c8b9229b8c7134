"""Write this step's K/V into the paged cache through ``slot_mapping`` (vLLM's
``reshape_and_cache``).

The grid is one program per new token: ``grid = (T,)``. Program t reads its flat slot
``s = slot_mapping[t]``, splits it into (block ``s // BLOCK_SIZE``, offset ``s % BLOCK_SIZE``)
and copies the token's (num_kv_heads, head_dim) tile of K and of V into that cache row. A
negative slot marks a padding token (vLLM's convention) and is skipped; a slot past the end of
the cache is skipped too, so a bad slot can never write outside the cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from chunkprefill.kernels._common import _require, check_triton_device
from chunkprefill.kernels.launch import launch_target, store_launch_config

_BITS = {2: torch.int16, 4: torch.int32}  # the store copies bits: one kernel per element size


@triton.jit
def reshape_and_cache_kernel(
    key_ptr,  # (T, NUM_KV_HEADS, HEAD_DIM) this step's keys
    value_ptr,  # (T, NUM_KV_HEADS, HEAD_DIM) this step's values
    k_cache_ptr,  # (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    v_cache_ptr,  # (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    slot_mapping_ptr,  # (T,) int64 flat slot per token
    num_slots,  # num_blocks * BLOCK_SIZE
    stride_key_tok, stride_key_head,  # key strides (head_dim stride is 1)
    stride_value_tok, stride_value_head,  # value strides (head_dim stride is 1)
    stride_k_blk, stride_k_slot, stride_k_head,  # k_cache strides (head_dim stride is 1)
    stride_v_blk, stride_v_slot, stride_v_head,  # v_cache strides (head_dim stride is 1)
    NUM_KV_HEADS: tl.constexpr,
    HEADS_PADDED: tl.constexpr,  # next power of two >= NUM_KV_HEADS
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,  # next power of two >= HEAD_DIM
    BLOCK_SIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)  # scalar int64
    if (slot < 0) | (slot >= num_slots):  # padding token (or a slot outside the cache)
        return
    block = slot // BLOCK_SIZE  # scalar: physical block
    offset = slot % BLOCK_SIZE  # scalar: row inside the block

    heads = tl.arange(0, HEADS_PADDED)  # (HEADS_PADDED,)
    dims = tl.arange(0, HEAD_DIM_PADDED)  # (HEAD_DIM_PADDED,)
    head_mask = heads < NUM_KV_HEADS  # (HEADS_PADDED,) real kv head
    dim_mask = dims < HEAD_DIM  # (HEAD_DIM_PADDED,) real head_dim lane
    tile_mask = head_mask[:, None] & dim_mask[None, :]  # (HEADS_PADDED, HEAD_DIM_PADDED)

    key = tl.load(key_ptr + token * stride_key_tok + heads[:, None] * stride_key_head
                  + dims[None, :], mask=tile_mask)  # (HEADS_PADDED, HEAD_DIM_PADDED)
    value = tl.load(value_ptr + token * stride_value_tok + heads[:, None] * stride_value_head
                    + dims[None, :], mask=tile_mask)  # (HEADS_PADDED, HEAD_DIM_PADDED)
    k_dst = (k_cache_ptr + block * stride_k_blk + offset * stride_k_slot
             + heads[:, None] * stride_k_head + dims[None, :])  # (HEADS_PADDED, HEAD_DIM_PADDED)
    v_dst = (v_cache_ptr + block * stride_v_blk + offset * stride_v_slot
             + heads[:, None] * stride_v_head + dims[None, :])  # (HEADS_PADDED, HEAD_DIM_PADDED)
    tl.store(k_dst, key, mask=tile_mask)
    tl.store(v_dst, value, mask=tile_mask)


def reshape_and_cache_args(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, slot_mapping: torch.Tensor
                           ) -> tuple[object, ...]:
    """The kernel's positional arguments (what the wrapper launches and ``aot`` compiles):
    the tensors as same-size integer views, so fp16 and bf16 share one compiled kernel."""
    bits = _BITS[key.element_size()]
    num_blocks, block_size = k_cache.shape[:2]
    return (key.view(bits), value.view(bits), k_cache.view(bits), v_cache.view(bits),
            slot_mapping, num_blocks * block_size,
            key.stride(0), key.stride(1),
            value.stride(0), value.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2))


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    check: bool = True,
) -> None:
    """Copy ``key``/``value`` (T, num_kv_heads, head_dim) into the caches (num_blocks,
    block_size, num_kv_heads, head_dim) at flat slots ``slot_mapping`` (T,) int64. In place.
    ``check=False`` skips the argument checks (the model checks them once per step)."""
    if check:
        _check_inputs(key, value, k_cache, v_cache, slot_mapping)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    cfg = store_launch_config(num_kv_heads, head_dim, key.element_size(),
                              launch_target(key.device))
    reshape_and_cache_kernel[(num_tokens,)](
        *reshape_and_cache_args(key, value, k_cache, v_cache, slot_mapping),
        **cfg.kernel_kwargs(num_kv_heads, head_dim, k_cache.shape[1]),
    )


def _check_inputs(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    _require(key.dim() == 3 and key.shape == value.shape,
             f"key and value must both be (T, num_kv_heads, head_dim), got {tuple(key.shape)} "
             f"and {tuple(value.shape)}")
    _require(k_cache.dim() == 4 and k_cache.shape == v_cache.shape,
             "k_cache and v_cache must both be (num_blocks, block_size, num_kv_heads, head_dim), "
             f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    num_tokens, num_kv_heads, head_dim = key.shape
    _require(key.shape[1:] == k_cache.shape[2:],
             f"key is (T, {num_kv_heads}, {head_dim}) but the cache holds "
             f"({k_cache.shape[2]}, {k_cache.shape[3]}) per slot")
    _require(key.dtype == value.dtype == k_cache.dtype == v_cache.dtype,
             f"key, value and cache dtypes must match, got {key.dtype}, {value.dtype}, "
             f"{k_cache.dtype}, {v_cache.dtype}")
    _require(key.dtype in (torch.float32, torch.float16, torch.bfloat16),
             f"dtype must be float32, float16 or bfloat16, got {key.dtype}")
    _require(slot_mapping.shape == (num_tokens,) and slot_mapping.dtype == torch.int64,
             f"slot_mapping must be ({num_tokens},) int64, got {slot_mapping.dtype} "
             f"{tuple(slot_mapping.shape)}")
    for name, t in (("key", key), ("value", value), ("k_cache", k_cache), ("v_cache", v_cache)):
        _require(t.stride(-1) == 1, f"{name} must have a contiguous last dimension")
    check_triton_device(key, value, k_cache, v_cache, slot_mapping)

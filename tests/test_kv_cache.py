from __future__ import annotations

import subprocess
import sys

import pytest

from chunkprefill import CacheConfig, KVCacheManager, Request


def test_block_table_grows_one_block_at_a_time_and_slot_mapping():
    kv = KVCacheManager(CacheConfig(block_size=4, num_blocks=6))
    other = Request("o", [0] * 4)
    kv.allocate_slots(other, 4)  # takes block 0, so r's blocks are not 0,1,2
    r = Request("r", [0] * 10)
    assert kv.allocate_slots(r, 3) == [1]  # tokens 0..2 -> one block
    r.num_computed_tokens = 3
    assert kv.allocate_slots(r, 1) == []  # token 3 still fits in block 1
    r.num_computed_tokens = 4
    assert kv.allocate_slots(r, 6) == [2, 3]  # tokens 4..9
    assert kv.get_block_table("r") == [1, 2, 3]
    # slot = block_table[p // 4] * 4 + p % 4, worked by hand
    assert kv.slot_mapping("r", 2, 7) == [6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match="holds 3"):
        kv.slot_mapping("r", 0, 13)


def test_allocation_failure_takes_nothing_and_free_returns_all():
    kv = KVCacheManager(CacheConfig(block_size=4, num_blocks=3))
    a, b = Request("a", [0] * 8), Request("b", [0] * 8)
    assert kv.allocate_slots(a, 8) == [0, 1]
    assert kv.allocate_slots(b, 8) is None
    assert kv.num_free_blocks == 1 and "b" not in kv.block_tables
    assert not kv.can_fit_full_sequence(b)
    kv.free(a)
    assert kv.num_free_blocks == 3 and kv.usage == 0.0
    assert kv.can_fit_full_sequence(b)


def test_scheduler_core_imports_no_torch():
    code = ("import sys; from chunkprefill import Scheduler, run_trace, SchedulerConfig; "
            "import chunkprefill.__main__; print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_core_modules_import_no_torch_numpy_or_matplotlib():
    """docs/architecture.md: the scheduler side (config, checks, request, request_queue,
    kv_cache, scheduler, trace, i18n) is plain Python, readable and runnable without the
    numeric stack (in Pyodide too)."""
    code = ("import sys; import chunkprefill.config, chunkprefill.checks, chunkprefill.request, "
            "chunkprefill.request_queue, chunkprefill.kv_cache, chunkprefill.scheduler, "
            "chunkprefill.trace, chunkprefill.i18n; "
            "print(sorted(m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"

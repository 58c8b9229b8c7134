"""Notebook 11's exercises (prefix caching). The right answers come from running the real
scheduler (``scenarios.shared_prompt_run``), never typed in here."""

from __future__ import annotations

from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.course.scenarios import shared_prompt_run
from chunkprefill.i18n import tr


def check_hit(answer: int) -> str:
    """Exercise 11.1: a 100-token prompt shares its first 70 tokens with a prompt that is in
    the cache; block_size 16. How many tokens does the prefix cache supply?"""
    run = shared_prompt_run(prefix_len=70, block_size=16, budget=32, prompt_len=100)
    return _verdict(answer, run.num_cached_tokens,
                    tr("only full blocks have a hash; how many whole 16-token blocks fit in "
                       "70?"))


def check_full_prompt(answer: int) -> str:
    """Exercise 11.2: the very same 64-token prompt comes again (block_size 16) while the
    first copy's blocks are still cached. How many prompt tokens must it compute?"""
    run = shared_prompt_run(prefix_len=64, block_size=16, budget=64, prompt_len=64)
    return _verdict(answer, run.num_computed_prompt_tokens,
                    tr("the hit is capped at num_tokens - 1 = 63 tokens, and it is made of "
                       "whole blocks"))


def check_chunks(answer: tuple[int, int]) -> str:
    """Exercise 11.3: budget 16, block_size 16, a 100-token prompt sharing its first 70 tokens
    with a cached one, alone in the scheduler. In how many chunks is its prompt computed with
    prefix caching on, and with it off? Answer ``(on, off)``."""
    on = shared_prompt_run(70, 16, 16, 100, enable_prefix_caching=True)
    off = shared_prompt_run(70, 16, 16, 100, enable_prefix_caching=False)
    return _verdict(tuple(answer), (len(on.chunks), len(off.chunks)),
                    tr("the hit counts as computed before the budget applies: divide the "
                       "tokens still owed by the budget, rounding up"))


def check_block_size(answer: tuple[int, int]) -> str:
    """Exercise 11.4: P (160 tokens) shares its first 100 tokens with the cached S, budget 32.
    How many tokens does the prefix cache supply with ``block_size`` 16, and with 4? Answer
    ``(hit at 16, hit at 4)``."""
    hits = tuple(shared_prompt_run(100, bs, 32, 160).num_cached_tokens for bs in (16, 4))
    return _verdict(tuple(answer), hits,
                    tr("a hit is whole blocks: how many whole blocks of each size fit in the 100 "
                       "shared tokens?"))

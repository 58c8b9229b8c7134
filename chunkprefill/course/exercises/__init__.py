"""Checkers for the notebooks' exercises, one module per notebook (``nb09`` for notebook 09,
...): each checker takes the reader's answer and says whether it is right, with a hint when
it is not. A notebook imports its own module, e.g. ``from chunkprefill.exercises import nb09``.
``tests/test_exercises*.py`` run every reference answer through its checker."""

from chunkprefill.exercises.nb09 import check_09_chunks, check_09_full_prompt, check_09_hit

__all__ = ["check_09_chunks", "check_09_full_prompt", "check_09_hit"]

"""Checkers for the notebooks' exercises, one module per notebook, named by its topic (so
renumbering the notebooks renames nothing): each checker takes the reader's answer and says
whether it is right, with a hint when it is not. A notebook imports its own module, e.g.
``from chunkprefill.course.exercises import prefix_caching as ex``. ``tests/test_exercises*.py``
run every reference answer through its checker."""

"""The waiting queue, in vLLM's two orders (``SchedulerConfig.policy``).

``"fcfs"``: arrival order; a preempted request goes back to the *front*.
``"priority"``: ordered by ``(priority, arrival_time, request_id)``, lower first, as
vLLM's ``Request.__lt__`` orders its heap; a preempted request simply re-enters at its
place in that order (a heap has no front). Both offer vLLM's method names
(``add_request``, ``prepend_request``, ``peek_request``, ``pop_request``) and iterate in
the order they will be served."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from chunkprefill.request import Request


class FCFSRequestQueue(deque):
    """A deque: the FCFS hot path stays C-speed (the aliases are deque's own methods)."""

    add_request = deque.append
    prepend_request = deque.appendleft
    pop_request = deque.popleft

    def peek_request(self) -> Request:
        return self[0]


class PriorityRequestQueue:
    """A heap of ``(priority, arrival_time, request_id, request)``: request ids are unique
    in a scheduler, so two entries never compare their requests."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, Request]] = []

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, (request.priority, request.arrival_time,
                                    request.request_id, request))

    prepend_request = add_request  # no front in a priority order

    def peek_request(self) -> Request:
        return self._heap[0][3]

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in sorted(self._heap))


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    return PriorityRequestQueue() if policy == "priority" else FCFSRequestQueue()

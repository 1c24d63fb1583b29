"""How a text longer than the window is cut: the ways (:data:`TRUNCATIONS`, described in
:mod:`attendout.encoding.classification`) and the sizes of head and tail. Plain Python: a run's config
checks its truncation here without importing torch."""

from __future__ import annotations

#: How a text longer than max_length is cut (see :mod:`attendout.encoding.classification`).
TRUNCATIONS = ("auto", "head-tail", "head", "sliding")


def head_tail_sizes(max_length: int) -> tuple[int, int]:
    """(head, tail) word pieces kept of a long text: a quarter and three quarters of ``max_length - 2``."""
    room = max_length - 2
    head = room // 4
    return head, room - head

"""A read of a lock node's children, as the queue recipe (queue.py) sees it: sorted once, with every contender's
position and the contender before it that keeps it waiting. A view is shared by every contender that shares the
listing (step_runner.Listing), so 10,000 waiters on one lock sort it once, not 10,000 times."""

from __future__ import annotations

import threading
from collections import OrderedDict

from .layout import Layout


class QueueView:
    """One read of a lock node's children, sorted once for every contender of one marker that shares it."""

    __slots__ = ("children", "order", "position", "exclusive_marker", "last_blocking", "tags", "layout", "_leases")

    def __init__(self, layout: Layout, children: list[str], marker: str) -> None:
        self.layout = layout
        self.children = children
        self._leases: bool | None = None
        self.order = layout.sort_contenders(children, marker)
        self.position = {child: i for i, (_, _, child) in enumerate(self.order)}
        self.exclusive_marker = layout.is_exclusive(marker)
        # For a shared contender: at each position, the index of the last exclusive contender before it (or -1).
        self.last_blocking: list[int] = []
        if not self.exclusive_marker:
            last = -1
            for i, (_, kind, _) in enumerate(self.order):
                self.last_blocking.append(last)
                if layout.is_exclusive(kind):
                    last = i
        self.tags: dict[int, dict[str, list[str]]] = {}

    def child(self, index: int) -> str:
        return self.order[index][2]

    def previous(self, index: int) -> int:
        """The index of the last contender before ``index`` that keeps the contender at ``index`` waiting (every
        one for an exclusive contender, the exclusive ones for a shared one); -1 if none."""
        if self.exclusive_marker:
            return index - 1
        return self.last_blocking[index]

    def has_semaphore_child(self) -> bool:
        if self._leases is None:
            self._leases = any(self.layout.is_semaphore_child(c) for c in self.children)
        return self._leases

    def tagged(self, tag: str) -> list[str]:
        """The children created with ``tag`` (one acquire's guid)."""
        by_tag = self.tags.get(len(tag))
        if by_tag is None:
            by_tag = self.tags[len(tag)] = {}
            for _, _, child in self.order:
                by_tag.setdefault(child[: len(tag)], []).append(child)
        return by_tag.get(tag, [])


_views: OrderedDict[tuple[int, str, str], tuple[list[str], QueueView]] = OrderedDict()
_views_lock = threading.Lock()


def view_of(layout: Layout, children: list[str], marker: str) -> QueueView:
    """The view of a listing, built once for all the contenders that share the listing (step_runner.Listing)."""
    key = (id(children), layout.name, marker)
    with _views_lock:
        cached = _views.get(key)
        if cached is not None and cached[0] is children:
            return cached[1]
    view = QueueView(layout, children, marker)
    if len(children) > 64:  # a short list is cheaper to sort again than to cache
        with _views_lock:
            _views[key] = (children, view)
            while len(_views) > 16:
                _views.popitem(last=False)
    return view

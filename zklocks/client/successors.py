"""The waiters of one session that watch a node of the same session: a release hands the lock to them in the
process, as soon as its delete is sent, instead of after ZooKeeper has committed it and sent the watch's event
(docs/design.md §5, "A handoff within one session").

It is sound because ZooKeeper answers one session's requests in order: every request the next holder sends comes
after the release's delete, and sees it applied. To any other session the lock was held by this session throughout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Successors:
    """node path -> the wake-ups of this session's waiters that watch it, each called once."""

    __slots__ = ("_by_node", "_lock")

    def __init__(self) -> None:
        # node -> (wake-up, whether that waiter is the node's only watcher) pairs
        self._by_node: dict[str, list[tuple[Callable[[], None], bool]]] = {}
        # Re-entrant: a release may run in a finalizer (a dying generator's) on a thread already inside.
        self._lock = threading.RLock()

    def watch(self, node: str, wake: Callable[[], None], *, sole: bool) -> Callable[[], None]:
        """Call ``wake`` when this session releases its hold through ``node``; the value stops that. ``sole``: the
        waiter is the only contender that watches ``node`` (an exclusive one, right behind it; shared contenders of
        any session may watch the same exclusive node)."""
        entry = (wake, sole)
        with self._lock:
            self._by_node.setdefault(node, []).append(entry)

        def stop() -> None:
            with self._lock:
                entries = self._by_node.get(node)
                if entries is not None and entry in entries:
                    entries.remove(entry)
                    if not entries:
                        del self._by_node[node]

        return stop

    def __len__(self) -> int:
        return len(self._by_node)

    def released(self, node: str) -> bool:
        """This session's hold through ``node`` ended cleanly and its delete was sent: wake who watched it. True
        if one of them was its only watcher: no other session waits for this delete."""
        with self._lock:
            entries = self._by_node.pop(node, ())
        for wake, _ in entries:
            wake()
        return any(sole for _, sole in entries)

    def clear(self) -> None:
        self._by_node = {}
        self._lock = threading.RLock()

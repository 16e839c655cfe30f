"""A small picture of one lock: who waited and who holds, and for how long, drawn from one snapshot.

The read model is the only source: each contender's node data says when it queued and (once it waited and held
for a while) when it acquired, and the node's creation time is the server's clock. So the picture needs no extra
ZooKeeper traffic and no store of our own. Its limit is the same as the snapshot's: it shows the holds and waits
that are going on now, not the ones that ended (those are in the metrics, ``zklocks_hold_seconds`` and
``zklocks_acquire_seconds``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .render import clean
from .snapshots import Contender, LockInfo

WIDTH = 640  # pixels of the time axis
ROW = 20  # pixels per contender
LABEL = 180  # pixels for the labels on the left


@dataclass(frozen=True)
class Bar:
    y: int
    label: str
    role: str  # "holder" or "waiter"
    wait_x: float
    wait_w: float
    hold_x: float
    hold_w: float
    title: str


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    label_width: int
    span: float  # seconds covered by the axis, ending now
    bars: list[Bar]


def _who(c: Contender) -> str:
    """The bar's label, from node data (anyone's): shown as the admin shows such text (render.clean)."""
    if c.raw is not None:
        return clean(c.raw[:30])
    who = f"{c.host or '?'} pid {c.pid or '?'}"
    return clean(f"{who} · {c.thread}" if c.thread else who)


def picture(lock: LockInfo, now: float) -> Picture | None:
    """Bars for every holder and waiter of ``lock`` on one time axis that ends at ``now``; None if nobody."""
    people = [(c, "holder") for c in lock.holders] + [(c, "waiter") for c in lock.waiters]
    if not people:
        return None
    start = min(c.queued_at or c.created_at for c, _ in people)
    span = max(now - start, 1.0)
    scale = WIDTH / span

    def x(t: float) -> float:
        return round(LABEL + max(0.0, t - start) * scale, 1)

    bars = []
    for i, (c, role) in enumerate(people):
        queued = c.queued_at or c.created_at
        held_from = (c.acquired_at or queued) if role == "holder" else now
        wait_end = held_from if role == "holder" else now
        bars.append(
            Bar(
                y=i * ROW,
                label=_who(c),
                role=role,
                wait_x=x(queued),
                wait_w=round(max(0.0, x(wait_end) - x(queued)), 1),
                hold_x=x(held_from),
                hold_w=round(max(0.0, x(now) - x(held_from)), 1) if role == "holder" else 0.0,
                title=(
                    f"{role} {c.mode}, token {c.token}: "
                    + (
                        f"waited {held_from - queued:.1f} s, holds for {now - held_from:.1f} s"
                        if role == "holder"
                        else f"waits for {now - queued:.1f} s"
                    )
                ),
            )
        )
    return Picture(width=LABEL + WIDTH + 10, height=len(bars) * ROW + 24, label_width=LABEL, span=span, bars=bars)

"""Plain-text rendering of snapshots for the management commands: safe for a terminal.

It does not import zklocks.admin: the commands work in projects without django.contrib.admin."""

from __future__ import annotations

import json

from ..names import shown, unsafe_to_show
from .snapshots import Contender


def duration(seconds: float | None) -> str:
    """'850 ms', '12.3 s', '4 min 05 s', '2 h 03 min', '3 d 4 h'."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def clean(value: object) -> str:
    """Node data comes from anywhere: never let it drive the terminal (escape sequences, newlines) or pose as
    something else (bidi controls, U+2028): names.shown escapes them."""
    return shown("" if value is None else str(value))


def json_text(value: object) -> str:
    """``value`` as indented JSON for a terminal: readable text stays as it is (``ensure_ascii=False``), but what
    names.shown escapes (bidi controls, C1 controls, U+2028...) is written as a JSON ``\\u`` escape, so that node
    data can neither drive the terminal nor reorder what it shows, and a JSON reader still gets the same text."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if all(ch < "\x7f" for ch in text):
        return text
    # JSON's own syntax is below DEL: a character from DEL up is inside a string, where an escape means the same.
    return "".join(_json_escape(ch) if ch >= "\x7f" and unsafe_to_show(ch) else ch for ch in text)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # a UTF-16 surrogate pair, as JSON writes it
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def who(c: Contender) -> str:
    if c.raw is not None:
        return f"[foreign] {clean(c.raw)}"
    text = f"{clean(c.host or '?')} pid {clean(c.pid or '?')}"
    if c.thread:
        text += f" {clean(c.thread)}"
    if c.task_name or c.task_id:
        text += f" task {clean(c.task_name or '')}{' [' + clean(c.task_id) + ']' if c.task_id else ''}"
    return text


def table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


__all__ = ["clean", "who", "table", "duration"]

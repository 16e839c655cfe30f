"""kazoo's logger for one session: why connecting failed, without a warning line per retry.

kazoo logs a WARNING for every failed connection attempt ("Cannot resolve zk1", "Connection dropped: socket
connection error: Connection refused"), and retries every 50 ms to 1 s: a management command run against a
ZooKeeper that is down printed a dozen of them. :class:`KazooLog` stands in for kazoo's logger: it remembers the
last failure per server, for the message of ZkUnavailable, and passes kazoo's warnings on at DEBUG on the logger
``zklocks.kazoo``; errors stay errors. zklocks logs its own warnings when a session is lost.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any

log = logging.getLogger("zklocks.kazoo")

_DROPPED = "Connection dropped: socket connection error: "
# Fields of kazoo's request reprs that carry secrets: Auth(auth='user:password'), Connect(passwd=b'...').
_SECRET_FIELDS = re.compile(r"""((?:auth|passwd|password)=)(b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*")""")
# kazoo's INFO line when a session is created: "session_passwd: <the password in hex>".
_SESSION_PASSWORD = re.compile(r"(session_passwd:?\s*)(b?'[^']*'|\S+)")


def _encodings(secret: str) -> tuple[str, ...]:
    """``secret`` as a line might carry it: raw, hex (either case), base64 (either alphabet, unpadded)."""
    raw = secret.encode()
    hexed = raw.hex()
    return (
        secret,
        hexed,
        hexed.upper(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    )


class KazooLog:
    """Duck-types the parts of logging.Logger that kazoo uses."""

    def __init__(self, secrets: list[str] | tuple[str, ...] = ()) -> None:
        self._secrets = [str(secret) for secret in secrets if secret]
        self._lock = threading.Lock()
        self._target: str | None = None  # "host:port" of the attempt under way
        self._failures: dict[str, str] = {}  # server -> why its last attempt failed

    def causes(self) -> str:
        """Why the last attempts failed, one entry per server ("" if none failed)."""
        with self._lock:
            return "; ".join(dict.fromkeys(self._failures.values()))

    def _note(self, msg: str, args: tuple) -> None:
        try:
            text = msg % args if args else msg
        except (TypeError, ValueError):
            return
        with self._lock:
            if msg.startswith("Connecting to ") and len(args) >= 3:
                self._target = f"{args[0]}:{args[2]}"
            elif msg.startswith("Cannot resolve ") and args:
                error = args[1] if len(args) > 1 else ""
                self._failures[str(args[0])] = f"cannot resolve {args[0]}: {getattr(error, 'strerror', None) or error}"
            elif self._target is not None and text.startswith(_DROPPED):
                self._failures[self._target] = _describe(self._target, text[len(_DROPPED) :])
            elif self._target is not None and text.startswith(("Connection dropped: ", "Connection time-out: ")):
                self._failures[self._target] = f"{self._target}: {text.split(': ', 1)[1]}"

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if level == logging.INFO or level == logging.WARNING:
            self._note(msg, args)
        if level >= logging.ERROR:
            log.log(level, "%s", self.scrub(msg, args), **kwargs)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("%s", self.scrub(msg, args), **kwargs)

    def scrub(self, msg: str, args: tuple) -> str:
        """kazoo's line without secrets: the Auth packet's credential, the session password, and any configured
        AUTH credential wherever it appears (kazoo logs every request it sends at DEBUG)."""
        try:
            text = msg % args if args else str(msg)
        except (TypeError, ValueError):
            text = f"{msg} {args!r}"
        text = _SECRET_FIELDS.sub(lambda m: f"{m.group(1)}<hidden>", text)
        text = _SESSION_PASSWORD.sub(lambda m: f"{m.group(1)}<hidden>", text)
        for secret in self._secrets:
            password = secret.split(":", 1)[1] if ":" in secret else ""
            # a password shorter than 3 would blank out letters of every line; the fields go above
            for form in (secret, password) if len(password) >= 3 else (secret,):
                # an encoding of a short secret is a few hex digits that ordinary lines hold too
                for encoded in _encodings(form) if len(form) >= 6 else (form,):
                    text = text.replace(encoded, "<hidden>")
        return text

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.DEBUG, msg, *args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.INFO, msg, *args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.WARNING, msg, *args, **kwargs)

    warn = warning

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.ERROR, msg, *args, **kwargs)

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exc_info", True)
        self.log(logging.ERROR, msg, *args, **kwargs)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging.Logger's name)
        return level >= logging.ERROR or log.isEnabledFor(level)


def _describe(target: str, error: str) -> str:
    if error == "Connection refused":
        return f"connection refused by {target}"
    if "SSL" in error or "TLS" in error or "certificate" in error.lower():
        return f"{target}: TLS: {error}"
    return f"{target}: {error}"

"""Where Debian's ZooKeeper and the JVM are (overridable with ZKLOCKS_ZK_CLASSPATH, ZKLOCKS_ZK_LOG_CLASSPATH,
ZKLOCKS_JAVA, ZKLOCKS_JAVAC), the one way the test harness compiles its small Java programs, and how a command
stops the process groups and servers it started, however it ends."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from . import orphans

# Without netty-codec the server accepts connections and then drops them.
CLASSPATH = os.environ.get("ZKLOCKS_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar")
# Debian's zookeeper.jar brings slf4j-api only: without a binding the servers log nothing. With these two (log4j
# 1.2 and its SLF4J binding) each server writes the server.log its log4j.properties asks for. They are used
# only when every one exists; an empty ZKLOCKS_ZK_LOG_CLASSPATH leaves them out.
LOG_CLASSPATH = os.environ.get(
    "ZKLOCKS_ZK_LOG_CLASSPATH", "/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
)
JAVA = os.environ.get("ZKLOCKS_JAVA", "java")
JAVAC = os.environ.get("ZKLOCKS_JAVAC", "javac")
JAVA_SOURCES = Path(__file__).resolve().parent / "java"

_compiled: dict[str, Path] = {}
_compile_lock = threading.Lock()


def compiled(source: str, classpath: str) -> Path:
    """The classes of ``java/<source>`` (or of the file at the absolute path ``source``) compiled with javac
    against ``classpath``, once per process, into a temporary directory removed at exit. RuntimeError with javac's
    output if it fails."""
    with _compile_lock:
        if source not in _compiled:
            if shutil.which(JAVAC) is None:
                raise RuntimeError(
                    "javac is not installed: run `apt-get install -y default-jdk-headless` (make test does)"
                )
            out = Path(tempfile.mkdtemp(prefix="zklocks-javac-"))
            atexit.register(shutil.rmtree, out, True)
            path = JAVA_SOURCES / source
            done = subprocess.run(
                [JAVAC, "-nowarn", "-cp", classpath, "-d", str(out), str(path)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode:
                raise RuntimeError(f"javac failed on {path}:\n{done.stdout}{done.stderr}")
            _compiled[source] = out
        return _compiled[source]


def stop_group(proc: subprocess.Popen, steps: tuple[tuple[int, float], ...] | None = None) -> None:
    """Stop the process group of ``proc`` (started with ``start_new_session=True``): each signal in turn, waiting
    up to its seconds for the leader to exit, SIGTERM then SIGKILL unless ``steps`` say otherwise; then SIGKILL
    whatever of the group outlived its leader."""
    for sig, wait in steps or ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            orphans.release(proc.pid)
            return  # the whole group is gone already
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    orphans.release(proc.pid)


def start_group(args: list[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen)`` as the leader of a process group of its own, which :func:`stop_group`
    stops and which dies with this process however it ends (orphans.py)."""
    proc = subprocess.Popen(args, start_new_session=True, **popen)
    orphans.adopt(proc.pid)
    return proc


_cleaning_up = False  # set while stopped_on_exit's stack unwinds


def _stop(signum: int, frame: object) -> None:
    if _cleaning_up:
        return  # a Ctrl-C pressed again must not cut the clean-up short
    # Raised on each signal before the clean-up: a first one that the code it landed in swallowed is not the last.
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def stop_on_signals() -> dict[int, Any]:
    """Make SIGINT (Ctrl-C) a KeyboardInterrupt and SIGTERM (``kill``'s and ``timeout``'s signal) a SystemExit, so
    that the ``finally`` blocks that stop what a command started run; both are ignored while a
    :func:`stopped_on_exit` stack unwinds. Returns the handlers it replaced. Main thread only (Python runs signal
    handlers there)."""
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, _stop)
    return previous


@contextlib.contextmanager
def stopped_on_exit() -> Iterator[contextlib.ExitStack]:
    """An ExitStack for what a command starts (servers, process groups), unwound however the command ends: on
    return, on an exception, on Ctrl-C or on SIGTERM (:func:`stop_on_signals`), with both signals ignored while it
    unwinds. One per command, in the main thread."""
    global _cleaning_up
    previous = stop_on_signals()
    try:
        with contextlib.ExitStack() as stack:
            try:
                yield stack
            finally:
                _cleaning_up = True
    finally:
        _cleaning_up = False
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


class _Startable(Protocol):
    def start(self) -> object: ...

    def cleanup(self) -> None: ...


S = TypeVar("S", bound=_Startable)


def start_on(stack: contextlib.ExitStack, server: S) -> S:
    """``server.start()`` with ``server.cleanup()`` pushed on ``stack`` first: a start that fails half-way (the
    process runs, its readiness check raised) or that a signal cuts short leaves nothing running either."""
    stack.callback(server.cleanup)
    server.start()
    return server

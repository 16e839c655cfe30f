"""The actors of the stateful model: each owns holds the way users' code does, and runs one command at a time.

- ``ThreadActor``: a thread of this process (threads share the process's session).
- ``TaskActor``: an asyncio task on an event loop of its own; besides its own commands it can start a child
  task or an executor job that acts on its handles (the combinations reviews found broken).
- ``ProcessActor``: a second process (``python -m tests.model.peer``) with a session of its own, reached
  directly (not through the link that a blip cuts).

Every command is bounded: an actor that does not answer within its bound fails the step, it never hangs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

STEP_BOUND = 30.0  # seconds any one command may take before the model calls it a hang


def outcome(call: Callable[[], Any]) -> str:
    """What a call came to, as the model compares it: 'True'/'False', 'ok' or the exception's class name."""
    try:
        result = call()
    except BaseException as exc:  # the model records whatever the public API raised
        return type(exc).__name__
    return "ok" if result is None else str(result)


class ThreadActor:
    kind = "thread"

    def __init__(self, name: str) -> None:
        self.name = name
        self.handles: dict[str, Any] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"model-{name}")

    def run(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        return self._pool.submit(fn, self.handles).result(STEP_BOUND)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class TaskActor:
    """One long-lived asyncio task runs every command, so that holds belong to that task."""

    kind = "task"

    def __init__(self, name: str) -> None:
        self.name = name
        self.handles: dict[str, Any] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"model-{name}", daemon=True)
        self._thread.start()
        self._inbox: asyncio.Queue = asyncio.run_coroutine_threadsafe(self._make_inbox(), self.loop).result(10)
        self._owner = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)

    async def _make_inbox(self) -> asyncio.Queue:
        return asyncio.Queue()

    async def _serve(self) -> None:
        while True:
            coro_fn, future = await self._inbox.get()
            try:
                future.set_result(await coro_fn(self.handles))
            except BaseException as exc:  # handed back to the model's thread
                future.set_exception(exc)

    def run_async(self, coro_fn: Callable[[dict[str, Any]], Any]) -> Any:
        """Run ``await coro_fn(handles)`` in the actor's own task."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self._inbox.put_nowait, (coro_fn, future))
        return future.result(STEP_BOUND)

    def run(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        """Run a plain call in the actor's task (acquire and release there use the task as the owner)."""

        async def call(handles):
            return fn(handles)

        return self.run_async(call)

    def close(self) -> None:
        self._owner.cancel()

        async def settle():  # let the cancelled owner task finish before the loop stops
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(settle(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class ProcessActor:
    """A second process with its own session; commands and answers are JSON lines."""

    kind = "process"

    def __init__(self, name: str, hosts: str, namespace: str, session_timeout: float) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.model.peer", hosts, namespace, str(session_timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=os.getcwd(),
        )
        self._lock = threading.Lock()

    def ask(self, **command) -> dict:
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
            answer: list[str] = []
            reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
            reader.start()
            reader.join(STEP_BOUND)
            if not answer or not answer[0]:
                raise AssertionError(f"the peer process did not answer {command} within {STEP_BOUND} s")
            return json.loads(answer[0])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


class MarkingWork:
    """Work a lock protects, handed to a thread: a step every 20 ms for ``seconds``, each behind a checkpoint, unless
    stopped; it notes the time of each step, so that a test can see whether it ran past the next holder's grant
    (``after``)."""

    def __init__(self, seconds: float) -> None:
        self.started = threading.Event()
        self.marks: list[float] = []
        self._until = time.monotonic() + seconds

    def __call__(self) -> None:
        from zklocks import checkpoint

        self.started.set()
        while time.monotonic() < self._until:
            checkpoint()
            self.marks.append(time.monotonic())
            time.sleep(0.02)

    def after(self, moment: float) -> list[float]:
        return [mark for mark in self.marks if mark > moment]


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> float | None:
    """Seconds until ``predicate()`` held, or None when it did not within ``timeout``."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            return None
        time.sleep(step)

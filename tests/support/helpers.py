import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

from kazoo.client import KazooClient

ROOT = Path(__file__).resolve().parents[2]


def spawn_worker(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.workers", *args], cwd=ROOT, env=env, start_new_session=True
    )


def read_records(path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def assert_no_overlap(records: list[dict]) -> None:
    """Exclusive holds never overlap, and tokens strictly increase in hold order."""
    ordered = sorted(records, key=lambda r: r["start"])
    for a, b in pairwise(ordered):
        assert a["end"] <= b["start"], f"overlapping holds: {a} and {b}"
        assert a["token"] < b["token"], f"tokens not increasing: {a} then {b}"


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def raw_client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=4.0)
    client.start(timeout=10)
    return client


def tree(client: KazooClient, path: str) -> list[str]:
    """Every node below ``path`` (not ``path`` itself)."""
    out = []
    if client.exists(path) is None:
        return out
    for child in client.get_children(path):
        full = f"{path}/{child}"
        out.append(full)
        out.extend(tree(client, full))
    return out


class HeldInThread:
    """Acquire ``handle`` in a thread of its own and keep it until ``release()``: holds belong to their thread."""

    def __init__(self, handle, **acquire_kwargs) -> None:
        import threading

        self.handle = handle
        self.token = None
        self.acquired = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(acquire_kwargs,), daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self, kwargs) -> None:
        try:
            self.acquired = self.handle.acquire(**kwargs)
            self.token = self.handle.token
        finally:
            self._ready.set()
        self._stop.wait(120)
        self.handle.release()

    def release(self) -> None:
        self._stop.set()
        self._thread.join(30)


def in_thread(fn, *args):
    """Run ``fn(*args)`` in a new thread (a different lock owner) and return its result or raise its error."""
    import threading

    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if "error" in box:
        raise box["error"]
    return box.get("value")

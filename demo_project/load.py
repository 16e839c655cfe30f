"""A small load generator for the demo: buyers reserving, readers browsing, a restock when sold out, and
Celery jobs now and then, so that the admin page shows live holders and queues.

    python -m demo_project.load --url http://127.0.0.1:8000 [--buyers 6] [--duration 3600]

It talks only to the given URL (the demo's own server on loopback) and stops by itself after --duration.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

SKUS = ["tea", "coffee", "cocoa", "honey", "rice"]
HOT = ["tea", "tea", "tea", "coffee", "coffee"]  # most buyers want tea: its lock has a queue


class Load:
    def __init__(self, url: str, buyers: int, duration: float) -> None:
        self.url = url.rstrip("/")
        self.buyers = buyers
        self.deadline = time.monotonic() + duration
        self.stop = threading.Event()
        self.counts: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def request(self, path: str, data: dict | None = None) -> tuple[int, dict]:
        body = None if data is None else urllib.parse.urlencode(data).encode()
        req = urllib.request.Request(self.url + path, data=body, method="POST" if data is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        except OSError:
            status, text = 0, b"{}"
        try:
            payload = json.loads(text or b"{}")
        except ValueError:
            payload = {}
        with self._lock:
            self.counts[f"{path.split('/')[1] or 'home'} {status}"] += 1
        return status, payload

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def buyer(self) -> None:
        while self.running():
            sku = random.choice(HOT if random.random() < 0.7 else SKUS)
            status, payload = self.request(f"/reserve/{sku}/", {"quantity": random.choice([1, 1, 2])})
            if status == 409 and payload.get("error") == "sold out":
                self.request("/restock/", {"units": 30})
            self.stop.wait(random.uniform(0.05, 0.4))

    def reader(self) -> None:
        while self.running():
            self.request("/catalog.json")
            self.stop.wait(random.uniform(0.1, 0.5))

    def jobs(self) -> None:
        while self.running():
            self.request("/jobs/report/", {})
            self.request("/jobs/audit/", {"sku": random.choice(SKUS)})
            self.request("/jobs/reindex/", {})  # skipped while one runs: one long hold to look at
            self.stop.wait(random.uniform(1.0, 3.0))

    def run(self) -> collections.Counter:
        workers = [threading.Thread(target=self.buyer, daemon=True) for _ in range(self.buyers)]
        workers += [threading.Thread(target=self.reader, daemon=True) for _ in range(3)]
        workers.append(threading.Thread(target=self.jobs, daemon=True))
        for w in workers:
            w.start()
        last = time.monotonic()
        while self.running():
            self.stop.wait(1.0)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                with self._lock:
                    print("load:", ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items())), flush=True)
        self.stop.set()
        for w in workers:
            w.join(35)
        return self.counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--buyers", type=int, default=6)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds before stopping by itself")
    args = parser.parse_args(argv)
    load = Load(args.url, args.buyers, args.duration)
    signal.signal(signal.SIGTERM, lambda *_: load.stop.set())
    signal.signal(signal.SIGINT, lambda *_: load.stop.set())
    counts = load.run()
    print("load: done;", ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

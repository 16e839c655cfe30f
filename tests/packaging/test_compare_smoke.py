"""The comparison's smoke form (``python -m benchmarks.compare --quick``) runs in ``make test``, so it cannot rot.

It starts every store itself (ZooKeeper, Redis, PostgreSQL, PgBouncer, etcd: make test installs them) and runs each
system's speed figures and one round of the fault schedule, four systems at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = {"zklocks", "kazoo", "redis-lock", "redlock", "pglock", "pglock-pgbouncer", "etcd"}
KEYS = {
    "system",
    "p50_ms",
    "p99_ms",
    "handoffs_per_s",
    "holds",
    "double_holders",
    "double_holders_fenced",
    "max_stall_s",
}


def compare_quick(tmp_path, systems: set[str], *extra: str) -> list[dict]:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare", "--quick", "--systems", ",".join(sorted(systems))]
        + ["--out", str(tmp_path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=130,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads((tmp_path / "compare.json").read_text())
    assert {r["system"] for r in results} == systems
    for r in results:
        check_row(r)
    assert "| zklocks |" in (tmp_path / "compare.md").read_text()
    return results


@pytest.mark.timeout(150)
def test_compare_quick_of_two_systems(tmp_path):
    """make test's smoke: zklocks (fenced) and a Redis lock (not), with every part of the run (the warm-up too)."""
    compare_quick(tmp_path, {"zklocks", "redis-lock"}, "--warm-up", "0.5")


@pytest.mark.timeout(150)
def test_compare_quick_of_every_system(tmp_path):
    results = compare_quick(tmp_path, SYSTEMS)
    # The schedule is strong enough to break a lock without fencing: some system shows a double holder.
    assert any(r["double_holders"] > 0 for r in results), results


def check_row(r: dict) -> None:
    assert KEYS <= r.keys(), r
    assert 0 < r["p50_ms"] <= r["p99_ms"] < 10_000, r
    assert r["handoffs_per_s"] > 0, r
    assert r["holds"] > 0, r
    assert r["faults_injected"] == 4, r  # one round: pause, pause after the check, partition, kill
    assert 0 <= r["double_holders"] <= r["holds"], r
    assert 0 < r["max_stall_s"] < 60, r
    if r["system"] in ("zklocks", "etcd"):  # the systems with a fencing token
        assert r["double_holders_fenced"] is not None and r["double_holders_fenced"] <= r["double_holders"], r
    else:
        assert r["double_holders_fenced"] is None, r

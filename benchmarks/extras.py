"""Figures of the other parts, measured in the same `python -m benchmarks` run."""

from __future__ import annotations


def celery_overhead(zk) -> dict:
    """SingleExecutionTask vs a plain task on the same prefork worker (its own ZooKeeper and Redis)."""
    from benchmarks.celery_overhead import run

    result = run(n=200)
    return {
        k: result[k]
        for k in (
            "plain_median_ms",
            "single_median_ms",
            "overhead_ms",
            "ratio",
            "floor_create_ms",
            "fraction_of_floor",
        )
    }


def inspect_snapshot(zk) -> dict:
    """One snapshot of a namespace of 1,000 locks and 5,000 nodes (the admin page's read)."""
    from benchmarks.inspect_snapshot import run

    result = run(zk.hosts, 1000, 5)
    return {
        "locks": result["locks"],
        "nodes": result["nodes"],
        "median_ms": round(result["median"] * 1000, 1),
        "best_ms": round(result["best"] * 1000, 1),
    }


def observe_overhead(zk) -> dict:
    """Uncontended cycles with metrics and tracing on, against none (the budget is 3 %)."""
    from benchmarks.observe_overhead import run

    return run(zk.hosts, rounds=5, seconds=1.0)


ALL = {
    "SingleExecutionTask overhead per task": celery_overhead,
    "inspect snapshot, 1,000 locks / 5,000 nodes": inspect_snapshot,
    "metrics and tracing on the uncontended path": observe_overhead,
}

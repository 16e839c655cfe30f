"""Mutual exclusion across OS processes, each with its own ZooKeeper session."""

import pytest

from tests.support.helpers import assert_no_overlap, read_records, spawn_worker
from zklocks.conf import alias_config

pytestmark = pytest.mark.zk


def test_exclusive_lock_across_processes(zk_server, tmp_path):
    out = tmp_path / "holds.jsonl"
    cfg = alias_config()
    procs = [
        spawn_worker(
            "hold",
            "--hosts",
            zk_server.hosts,
            "--namespace",
            cfg.namespace,
            "--count",
            "15",
            "--hold",
            "0.005",
            "--out",
            str(out),
        )
        for _ in range(4)
    ]
    try:
        codes = [p.wait(90) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert codes == [0, 0, 0, 0]
    records = read_records(out)
    assert len(records) == 60
    assert len({r["pid"] for r in records}) == 4
    assert_no_overlap(records)

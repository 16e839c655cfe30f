"""Pre-seed a ZooKeeper data dir: a snapshot written by ZooKeeper's own classes before the server first starts.

A test can so begin where a long-lived deployment is, e.g. with a lock node whose sequence counter is a few
creates short of 2**31-1. The writer is ``java/SeedSnapshot.java``, compiled with ``javac`` (Debian:
``default-jdk-headless``) against the server's own jar, once per process, into a temporary directory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .runtime import CLASSPATH, JAVA, compiled


def _classes() -> Path:
    return compiled("SeedSnapshot.java", CLASSPATH)


def seed_snapshot(data_dir: str | os.PathLike, cversions: dict[str, int]) -> None:
    """Write a snapshot into ``data_dir`` in which every path exists (with its parents) and has the child
    counter given: the next sequential child created below it gets that number as its suffix."""
    args = [f"{path}={int(cversion)}" for path, cversion in cversions.items()]
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [JAVA, "-cp", f"{_classes()}:{CLASSPATH}", "SeedSnapshot", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode:
        raise RuntimeError(f"SeedSnapshot failed:\n{done.stdout}{done.stderr}")

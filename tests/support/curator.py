"""Apache Curator contenders in a JVM, next to zklocks contenders (the LAYOUT "curator" tests).

The program is ``tests/support/java/CuratorContender.java``, compiled with ``javac`` against Debian's Curator
(``libcurator-recipes-java``) once per process. Each hold is a JSON line in a log file, timed with
``System.nanoTime()`` (CLOCK_MONOTONIC on Linux, as ``time.monotonic_ns()``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from zklocks.testing.runtime import JAVA, JAVAC, compiled, start_group, stop_group

# Debian's Apache Curator (libcurator-recipes-java) and what it needs at run time.
CURATOR_CLASSPATH = os.environ.get(
    "ZKLOCKS_CURATOR_CLASSPATH",
    ":".join(
        f"/usr/share/java/{jar}.jar"
        for jar in (
            "curator-recipes",
            "curator-framework",
            "curator-client",
            "zookeeper",
            "zookeeper-jute",
            "guava",
            "slf4j-api",
            "slf4j-nop",
        )
    ),
)


def available() -> str | None:
    """None if Curator and javac are installed, else what is missing."""
    if shutil.which(JAVAC) is None:
        return "javac (apt-get install -y default-jdk-headless)"
    missing = [jar for jar in CURATOR_CLASSPATH.split(":") if not os.path.exists(jar)]
    return f"{', '.join(missing)} (apt-get install -y libcurator-recipes-java)" if missing else None


def _classes() -> Path:
    missing = available()
    if missing:
        raise RuntimeError(f"Apache Curator tests need {missing}; make test installs it")
    return compiled(str(Path(__file__).resolve().parent / "java" / "CuratorContender.java"), CURATOR_CLASSPATH)


class CuratorContenders:
    """``threads`` Curator contenders on ``path`` in one JVM for ``seconds`` (a context manager).

    ``recipe``: "mutex" (InterProcessMutex), "rw" (InterProcessReadWriteLock: even threads write, odd ones read)
    or "semaphore" (InterProcessSemaphoreV2 with ``max_leases``). ``start()`` returns once the JVM's session is up.
    """

    def __init__(
        self,
        hosts: str,
        path: str,
        recipe: str,
        log: str | os.PathLike,
        *,
        threads: int = 2,
        seconds: float = 4.0,
        hold_ms: int = 5,
        max_leases: int = 1,
        credential: str | None = None,
    ) -> None:
        self.args = [hosts, path, recipe, str(threads), str(seconds), str(hold_ms), str(log), str(max_leases)]
        if credential is None:  # the suite's aliases' identity (derived from its SECRET_KEY), as zklocks_credential
            from tests.support.helpers import project_auth

            credential = project_auth()[0][1]
        self.credential = credential
        self.seconds = seconds
        self.proc: subprocess.Popen | None = None
        self.output = ""

    def start(self) -> CuratorContenders:
        self.proc = start_group(
            [JAVA, "-cp", f"{_classes()}:{CURATOR_CLASSPATH}", "CuratorContender", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "ZKLOCKS_CREDENTIAL": self.credential},
        )
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:  # the JVM gives up on its own after 20 s without a session
            lines.append(line)
            if line.strip() == "READY":
                return self
        self.stop()
        raise RuntimeError("CuratorContender did not start:\n" + "".join(lines))

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the JVM to finish; its exit status (0: every acquire succeeded in time)."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            out, _ = self.proc.communicate(timeout=self.seconds + 40 if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self.output += out
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, steps=((signal.SIGKILL, 10.0),))

    def __enter__(self) -> CuratorContenders:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

"""Where Debian's ZooKeeper and the JVM are (overridable with ZKLOCKS_ZK_CLASSPATH, ZKLOCKS_ZK_LOG_CLASSPATH,
ZKLOCKS_JAVA, ZKLOCKS_JAVAC), and the one way the test harness compiles its small
Java programs."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

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
    up to its seconds for the leader to exit, SIGTERM then SIGKILL unless ``steps`` say otherwise."""
    import signal

    for sig, wait in steps or ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # the whole group is gone already
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue

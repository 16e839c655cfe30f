"""``python -m zklocks.testing.server``: a standalone ZooKeeper for development, until Ctrl-C, its data kept across
restarts (docs/testing.md, "A ZooKeeper for development"). It can be started again at once after Ctrl-C: the
connections the previous one left in TIME_WAIT do not make its port busy (:func:`zklocks.testing.ports.bindable`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import ports as _ports

if TYPE_CHECKING:
    from .server import ZkServer


def dev_data_dir(port: int) -> Path:
    """Where ``python -m zklocks.testing.server --port PORT`` keeps its data unless told otherwise:
    ``$XDG_STATE_HOME/zklocks/dev-server-PORT``, or ``~/.local/state/zklocks/dev-server-PORT`` when
    ``XDG_STATE_HOME`` is unset or not an absolute path."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "zklocks" / f"dev-server-{port}"


def run(server_class: type[ZkServer], argv: list[str] | None = None) -> int:
    """The development server's command line: parse ``argv``, start a ``server_class`` and serve until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m zklocks.testing.server",
        description="Run a local ZooKeeper for development (Debian's zookeeper package). Prints host:port on "
        "stdout, stops on Ctrl-C, and can be started again at once on the same port. Its data (nodes, "
        "sessions) is kept across restarts in $XDG_STATE_HOME/zklocks/dev-server-PORT "
        "(~/.local/state/zklocks/dev-server-PORT without XDG_STATE_HOME); --ephemeral starts empty.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=2181,
        help="client port; 0 for a free one, whose data is temporary unless --data-dir is given (default 2181)",
    )
    parser.add_argument(
        "--tick-time",
        type=int,
        default=2000,
        metavar="MS",
        help="tickTime in milliseconds; sessions may last 2 to 20 ticks (default 2000: SESSION_TIMEOUT from 4 to 40 s)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the data (and the server's config and logs) in DIR instead of the per-port default",
    )
    where.add_argument(
        "--ephemeral",
        action="store_true",
        help="start empty, in a temporary directory removed when the server stops (the kept data is left alone)",
    )
    args = parser.parse_args(argv)
    if args.port and not _ports.bindable(args.port):
        print(f"port {args.port} is busy (another ZooKeeper?): give --port 0 for a free one", file=sys.stderr)
        return 2
    workdir = args.data_dir
    if workdir is None and not args.ephemeral and args.port:
        workdir = str(dev_data_dir(args.port))
    # Kept data: old snapshots and transaction logs are purged every hour (the 3 newest snapshots stay).
    extra = {} if workdir is None else {"autopurge.purgeInterval": "1", "autopurge.snapRetainCount": "3"}
    server = server_class(tick_time=args.tick_time, workdir=workdir, port=args.port or None, extra=extra)
    if workdir is None:
        kept = "temporary, removed when the server stops"
    else:
        kept = "kept across restarts" + ("" if args.data_dir else "; --ephemeral starts empty")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        server.start()
        print(server.hosts, flush=True)
        print(f"data in {server.dir} ({kept})", file=sys.stderr, flush=True)
        print(
            f"ZooKeeper serving on {server.hosts} (tickTime {args.tick_time} ms); "
            f'settings: ZKLOCKS = {{"default": {{"HOSTS": "{server.hosts}"}}}}. Ctrl-C stops it.',
            file=sys.stderr,
            flush=True,
        )
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        print(f"ZooKeeper exited; see {server.dir}/stdout.log", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        print(f"ZooKeeper did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        server.cleanup()
        print("ZooKeeper stopped", file=sys.stderr, flush=True)

"""Worker processes for the multi-process tests: ``python -m tests.support.workers <mode> ...``.

Each records its holds as JSON lines: {"start", "end", "token", "pid"}; monotonic clocks are system-wide on
Linux, so intervals of different processes compare.
"""

import argparse
import json
import os
import sys
import time


def setup(hosts: str, namespace: str, session_timeout: float) -> None:
    import django
    from django.conf import settings

    settings.configure(
        # tests/settings.py's unless a test gives another (a key rotation): the aliases derive their identity from it
        SECRET_KEY=os.environ.get("ZKLOCKS_TEST_SECRET_KEY", "zklocks-tests"),
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": namespace,
                "SESSION_TIMEOUT": session_timeout,
                "CONNECT_TIMEOUT": 5.0,
                "REAP_INTERVAL": 0,
            }
        },
        USE_TZ=True,
    )
    django.setup()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "hold-forever"])
    p.add_argument("--hosts", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--name", default="shared-resource")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--hold", type=float, default=0.01)
    p.add_argument("--shared", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--session-timeout", type=float, default=4.0)
    p.add_argument(
        "--record-exhausted",
        action="store_true",
        help="record SequenceExhausted refusals and go on (holds still count up to --count)",
    )
    args = p.parse_args(argv)
    setup(args.hosts, args.namespace, args.session_timeout)
    from zklocks import SequenceExhausted, zk_lock

    with open(args.out, "a", buffering=1) as out:
        if args.mode == "hold-forever":
            with zk_lock(args.name, shared=args.shared) as lock:
                out.write(json.dumps({"held": True, "token": lock.token, "pid": os.getpid()}) + "\n")
                while True:
                    time.sleep(1)
        done = 0
        while done < args.count:
            try:
                with zk_lock(args.name, shared=args.shared) as lock:
                    start = time.monotonic()
                    time.sleep(args.hold)
                    end = time.monotonic()
                    token = lock.token
            except SequenceExhausted as exc:
                if not args.record_exhausted:
                    raise
                out.write(json.dumps({"exhausted": str(exc), "pid": os.getpid()}) + "\n")
                time.sleep(0.01)
                continue
            done += 1
            out.write(
                json.dumps({"start": start, "end": end, "token": token, "pid": os.getpid(), "shared": args.shared})
                + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

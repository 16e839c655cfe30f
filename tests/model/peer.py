"""The model's second process: ``python -m tests.model.peer HOSTS NAMESPACE SESSION_TIMEOUT``.

Reads one JSON command per line on stdin and answers one JSON line: acquire (with ``lock_delay``, if given), try,
release, ensure_held, session.
"""

import json
import sys
import time


def main() -> int:
    from tests.support.workers import setup

    hosts, namespace, session_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    setup(hosts, namespace, session_timeout)
    from zklocks import zk_lock
    from zklocks.client.pools import connections

    handles = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        op, name = cmd["op"], cmd.get("name")
        try:
            if op == "acquire":
                handle = handles.setdefault(
                    name, zk_lock(name, timeout=cmd.get("timeout", 1.0), lock_delay=cmd.get("lock_delay"))
                )
                result = handle.acquire(blocking=cmd.get("blocking", True), timeout=cmd.get("timeout"))
            elif op == "release":
                result = handles[name].release(wait=True) if name in handles else None
            elif op == "ensure_held":
                result = handles[name].ensure_held() if name in handles else "none"
            elif op == "session":
                deadline = time.monotonic() + 20
                while True:  # the pool may be opening a new session (after an expiry)
                    client = connections["default"].session().client
                    if client.connected and client.client_id is not None:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError("no connected session within 20 s")
                    time.sleep(0.05)
                session_id, password = client.client_id
                result = [session_id, password.hex()]
            else:
                result = f"unknown op {op}"
            answer = {
                "at": time.monotonic(),
                "ok": True,
                "result": result if result is None or isinstance(result, (bool, str, list)) else str(result),
            }
        except Exception as exc:
            answer = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:300]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The one reset-after-fork entry point (zklocks/forking.py): stage order, and a failing reset stops no other."""

import subprocess
import sys
import textwrap

import pytest

# A fresh interpreter: registering resets here would leave them in the suite's own process for every later fork.
CHILD = textwrap.dedent(
    """
    import os
    from zklocks import forking

    ran = []
    def state_first():
        ran.append("state-1")
        raise RuntimeError("broken reset")
    def sessions():
        ran.append("sessions")
    def state_second():
        ran.append("state-2")

    forking.register(state_first)
    forking.register(sessions, forking.SESSIONS)
    forking.register(state_second, forking.STATE)
    try:
        forking.register(state_second, 7)
    except ValueError as exc:
        print("refused:", exc)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, " ".join(ran).encode())
        os._exit(0)
    os.close(w)
    print("child:", os.read(r, 1000).decode())
    os.waitpid(pid, 0)
    print("parent:", " ".join(ran) or "-")
    """
)


@pytest.mark.timeout(60)
def test_sessions_reset_first_and_a_failing_reset_stops_no_other():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=50, check=True, start_new_session=True
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "refused: zklocks: unknown fork reset stage 7 (SESSIONS or STATE)"
    assert lines[1] == "child: sessions state-1 state-2"
    assert lines[2] == "parent: -"  # the resets run in the child only
    assert "reset after fork __main__.state_first failed" in out.stderr
    assert "RuntimeError: broken reset" in out.stderr

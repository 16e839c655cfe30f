"""What the stateful model found, as the shrunk programs it printed, and which of them are still open.

Each finding has a plain regression test in test_model_findings.py (or beside the code it concerns). ``OPEN``
lists the rules whose finding is not fixed yet: ``make test-all`` leaves them out of its bounded model run, and
their regression tests are expected failures that name the issue which owns the fix. A fixed finding leaves
``OPEN``, and its regression test becomes a plain one.
"""

# Fixed: "release_during_outage" (a release sent during an outage left a ghost hold for a session timeout after
# the restart; zklocks/client/abandoned.py closes the given-up session once a server answers). "silent_blip": an
# idle holder lost its hold on a blip of half the session timeout at some moments of the lease's cycle (the keeper
# now keeps the lease half the timeout ahead, client/session.py); and after
# acquire(t1, x, blocking=False); acquire_while_down(t2, x); silent_blip(2.0), the blip began while the process
# was still reconnecting on kazoo's backoff, so the server saw outage, backoff and blip as one silence longer than
# half the timeout (the model's own fault: silent_blip now starts from a working link, machine.link_settled).
# Also the model's own: acquire(t1, y); acquire(t1, x); cancel_work_in_a_thread() x 6; acquire(t1, x) -> LockLost,
# the documented answer of a re-entrant acquire whose hold a fault ended (docs/lost.md); the acquire rule now
# accepts it where the actor's own hold was lost.
# Also the model's own: ...; child_task_try_lock_then_release(x); wipe(); unclean_loss_under_lock_delay(p, t2,
# queued=True) -> "t2 did not queue for 'd' within 10 s". After the wipe, no server takes this process's session
# back, and its acquire answered ZkUnavailable (the contract: no session within CONNECT_TIMEOUT) until the session
# was dropped, a session timeout after the server's return (docs/reliability.md, "A server that comes back empty";
# tests/faults/test_server_returns_empty.py). The rule waited for the queue node only; it now asks again after
# ZkUnavailable, as a caller would, and requires the queue within SESSION_TIMEOUT + CONNECT_TIMEOUT (+ 2 s).
# "child_task_try_lock_then_release" (issue 34), drawn on the code before 68a0abd: ...; acquire(a1, x,
# blocking=False); ...; child_task_try_lock_then_release(x, via="release_async_wait") -> "a1's hold of 'x' says
# LockLost": the child's release_async ran in a thread acting as the child, and releasing_for gave that thread
# the parent's hold (tests/locks/test_release_ownership.py, the child and helper-thread tests).
# rule -> the issue that owns the fix
OPEN: dict[str, str] = {}

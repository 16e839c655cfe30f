"""What the stateful model found, as the shrunk programs it printed, and which of them are still open.

Each finding has a plain regression test in test_model_findings.py (or beside the code it concerns). ``OPEN``
lists the rules whose finding is not fixed yet: ``make test-all`` leaves them out of its bounded model run, and
their regression tests are expected failures that name the issue which owns the fix. A fixed finding leaves
``OPEN``, and its regression test becomes a plain one.
"""

# Fixed: "release_during_outage" (a release sent during an outage left a ghost hold for a session timeout after
# the restart; zklocks/client/abandoned.py closes the given-up session once a server answers). "silent_blip": an
# idle holder lost its hold on a blip of half the session timeout at some moments of the lease's cycle (the keeper
# now keeps the lease half the timeout ahead, client/lease_keeping.py); and after
# acquire(t1, x, blocking=False); acquire_while_down(t2, x); silent_blip(2.0), the blip began while the process
# was still reconnecting on kazoo's backoff, so the server saw outage, backoff and blip as one silence longer than
# half the timeout (the model's own fault: silent_blip now starts from a working link, machine.link_settled).
# rule -> the issue that owns the fix
OPEN: dict[str, str] = {}

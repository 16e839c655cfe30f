"""What the stateful model found, as the shrunk programs it printed, and which of them are still open.

Each finding has a plain regression test in test_model_findings.py (or beside the code it concerns). ``OPEN``
lists the rules whose finding is not fixed yet: ``make test-all`` leaves them out of its bounded model run, and
their regression tests are expected failures that name the issue which owns the fix. A fixed finding leaves
``OPEN``, and its regression test becomes a plain one.
"""

# Fixed: "release_during_outage" (a release sent during an outage left a ghost hold for a session timeout after
# the restart; zklocks/client/abandoned.py closes the given-up session once a server answers). "silent_blip" is
# partly fixed: an idle holder now keeps its holds through blips of half the session timeout at any moment of the
# lease's cycle (client/lease_keeping.py, and the 8 blips of test_model_findings.py), but the combination below
# still loses one.
# rule -> the issue that owns the fix
OPEN = {
    # acquire(t1, x, blocking=False); acquire_while_down(t2, x); silent_blip(2.0) -> t1 lost 'x' on a blip of
    # exactly half its 4 s session, after a reconnect (the idle blips of test_model_findings.py pass).
    "silent_blip": "issue 35 (outage and recovery): after a reconnect, an idle holder may lose its hold on a blip "
    "of exactly half the session timeout",
}

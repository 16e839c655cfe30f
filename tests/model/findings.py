"""What the stateful model found, as the shrunk programs it printed, and which of them are still open.

Each finding has a plain regression test in test_model_findings.py (or beside the code it concerns). ``OPEN``
lists the rules whose finding is not fixed yet: ``make test-all`` leaves them out of its bounded model run, and
their regression tests are expected failures that name the issue which owns the fix. A fixed finding leaves
``OPEN``, and its regression test becomes a plain one.
"""

# Fixed: "release_during_outage" (a release sent during an outage left a ghost hold for a session timeout after
# the restart; zklocks/client/abandoned.py closes the given-up session once a server answers), and "silent_blip"
# (an idle holder lost its holds on a silent blip of half the session timeout, which ZooKeeper survives; the lease
# keeper now keeps the lease half a session timeout ahead, client/lease_keeping.py).
# rule -> the issue that owns the fix
OPEN = {
    "cancel_work_in_a_thread": "issue 34 (lost means stopped): work handed to asyncio.to_thread outlives the lease",
}

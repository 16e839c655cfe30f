"""The stateful model on a 3-node ensemble, with one more fault: the server this process is pinned to is cut off
from the quorum (test_lock_model.py runs it).

A server cut off from the others still answers its clients' reads from its own copy for syncLimit ticks. Every
rule of LockModel runs here too (a restart or a wipe takes the whole ensemble); the peer process and the observer
reach a server of the majority directly, and this process reaches only its pinned server, through the proxy that
a blip cuts.
"""

from __future__ import annotations

import time

from hypothesis import strategies as st
from hypothesis.stateful import rule

from tests.model.actors import wait_for
from tests.model.machine import LOCAL, NAMES, UNAVAILABLE, LockModel, skippable

SERVING = ("leader", "follower", "standalone")


class EnsembleServers:
    """What LockModel's rules ask of "the server", done to the whole ensemble; ``hosts`` is a majority server's."""

    def __init__(self, ensemble, pinned: int) -> None:
        self.ensemble = ensemble
        self.pinned = pinned
        self.direct = ensemble.servers[(pinned + 1) % len(ensemble.servers)]

    @property
    def hosts(self) -> str:
        return self.direct.hosts

    def restart(self, wipe: bool = False) -> None:
        self.ensemble.restart(wipe=wipe)

    def stop(self) -> None:
        for server in self.ensemble.servers:
            server.kill()
            server.proc = None

    def start(self) -> None:
        self.ensemble.start()


class QuorumLockModel(LockModel):
    @rule(actor=st.sampled_from(LOCAL), name=st.sampled_from(NAMES), blocking=st.booleans())
    @skippable
    def cut_off_from_the_quorum(self, actor: str, name: str, blocking: bool) -> None:
        """No contention verdict from a server cut off from the quorum: while it still answers from its copy,
        the majority frees the lock (the peer releases its holds of it), and an acquire from this process must
        end in ZkUnavailable, never in False or LockTimeout read from the stale copy."""
        servers: EnsembleServers = self.world.server
        released = False
        if not self.holders(name) and self.call("p", "acquire", name, blocking=False) == "True":
            self.count[("p", name)] = 1  # the pinned server's copy will show it held once the majority frees it
            time.sleep(0.3)  # the follower applies the commit a moment after the majority
        servers.ensemble.isolate(servers.pinned)
        try:
            while self.count.get(("p", name), 0) > 0:
                said = self.call("p", "release", name)
                assert said in ("ok", "none"), f"p release({name!r}) on the majority gave {said}"
                self.count[("p", name)] -= 1
                released = True
            got = self.call(actor, "acquire", name, blocking=blocking, timeout=1.0 if blocking else None)
        finally:
            servers.ensemble.heal_all()
        pinned = servers.ensemble.servers[servers.pinned]
        back = wait_for(lambda: pinned.mode() in SERVING, 60, step=0.1)
        assert back is not None, "the pinned server did not rejoin the ensemble within 60 s of the heal"
        if got == "True":  # a reentrant acquire of a hold it has is answered locally
            assert self.count.get((actor, name)), f"{actor} acquired {name!r} on a server cut off from the quorum"
            self.count[(actor, name)] += 1
            return
        if got == "LockLost":  # its own hold, ended by the cut (its session expired meanwhile)
            assert self.count.get((actor, name)), f"{actor} acquire({name!r}) gave LockLost without a hold"
            return
        assert got in UNAVAILABLE, (
            f"{actor} acquire({name!r}, blocking={blocking}) gave {got} from a server cut off from the quorum"
        )
        if released:
            self.after_release(name)

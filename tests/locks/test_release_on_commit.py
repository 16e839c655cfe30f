"""release_on_commit: the lock is released after the database commit, or at once on rollback."""

import contextlib
import gc
import threading
import time

import pytest
from django.db import connection, transaction

from tests.support.app.models import Stock
from zklocks import zk_lock

pytestmark = [pytest.mark.zk, pytest.mark.django_db(transaction=True)]


def held_elsewhere(name):
    box = {}

    def run():
        lock = zk_lock(name, blocking=False)
        box["got"] = lock.acquire()
        if box["got"]:
            lock.release()

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    return not box["got"]


def test_release_waits_for_commit():
    with transaction.atomic():
        with zk_lock("txn", release_on_commit=True):
            pass
        assert held_elsewhere("txn")  # still inside the transaction: still locked
    assert not held_elsewhere("txn")


def test_rollback_releases_at_once():
    with pytest.raises(RuntimeError, match="boom"):  # noqa: PT012 the rollback is the whole block
        with transaction.atomic():
            with zk_lock("txn-rb", release_on_commit=True):
                pass
            assert held_elsewhere("txn-rb")
            raise RuntimeError("boom")
    assert not held_elsewhere("txn-rb")


def test_a_rolled_back_trigger_collected_inside_the_handles_own_lock_releases_soon_after(request):
    # Caught in a reference cycle, the trigger dies when the collector runs: here while this thread holds the
    # handle's lock, which the release needs. The release then runs on the worker thread instead of waiting here.
    lock = zk_lock("txn-cycle", release_on_commit=True)
    gc.disable()  # an automatic collection on this thread would release it before the test's own
    request.addfinalizer(gc.enable)
    with pytest.raises(RuntimeError, match="boom"):  # noqa: PT012 the rollback is the whole block
        with transaction.atomic():
            with lock:
                pass
            cycle = [connection.run_on_commit[-1]]
            cycle.append(cycle)
            raise RuntimeError("boom")
    assert held_elsewhere("txn-cycle")  # the cycle keeps the trigger alive past the rollback
    del cycle
    done = threading.Event()

    def collect_inside_the_lock():
        with lock._mine_lock:
            gc.collect()
        done.set()

    threading.Thread(target=collect_inside_the_lock, daemon=True).start()
    assert done.wait(10), "the collection waited for the lock its own thread holds"
    deadline = time.monotonic() + 5
    while held_elsewhere("txn-cycle") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not held_elsewhere("txn-cycle")


def test_outside_a_transaction_it_releases_immediately():
    assert not connection.in_atomic_block
    with zk_lock("txn-none", release_on_commit=True):
        pass
    assert not held_elsewhere("txn-none")


def _writer(release_on_commit, written, stock_id):
    """Request A: ATOMIC_REQUESTS-style outer transaction; lock; update; the view returns; commit later."""
    try:
        with transaction.atomic():
            with zk_lock("stock", timeout=10, release_on_commit=release_on_commit):
                Stock.objects.filter(pk=stock_id).update(quantity=9)
                written.set()
            time.sleep(0.4)  # the response is still being built while the transaction is open
    finally:
        connection.close()


def _reader(release_on_commit, written, seen, stock_id):
    """Request B: takes the same lock, then reads what the previous holder wrote."""
    try:
        written.wait(10)
        with transaction.atomic():
            with zk_lock("stock", timeout=10, release_on_commit=release_on_commit):
                seen.append(Stock.objects.get(pk=stock_id).quantity)
    finally:
        connection.close()


@pytest.mark.parametrize("release_on_commit,expected", [(False, 10), (True, 9)])
def test_atomic_requests_pitfall(release_on_commit, expected):
    stock = Stock.objects.create(quantity=10)
    written, seen = threading.Event(), []
    threads = [
        threading.Thread(target=_writer, args=(release_on_commit, written, stock.pk)),
        threading.Thread(target=_reader, args=(release_on_commit, written, seen, stock.pk)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Plain form: the lock was released before A committed, so B read the stale 10.
    # release_on_commit: B got the lock only after A's commit and read 9.
    assert seen == [expected]


def raise_on_return(code, caller):
    """A tracer raising Interrupted as the first frame of ``code`` called from ``caller`` returns (where a signal
    handler's exception lands after the call's work is done)."""
    from tests.support.interrupts import Interrupted

    seen: list = []

    def local(frame, event, arg):
        if event == "return" and not seen:
            seen.append(frame)
            raise Interrupted(f"injected as {code.co_qualname} returned")
        return local

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is code and frame.f_back.f_code is caller and not seen:
            return local
        return None

    return tracer, seen


@pytest.mark.parametrize("end", ["commit", "rollback", "no transaction"])
@pytest.mark.parametrize("form", ["zk_lock", "zk_multi_lock"])
def test_an_exception_as_the_release_is_handed_to_the_transaction_leaves_nothing_held(form, end):
    """A signal handler's exception lands in turn on each call that hands the release to the transaction, on that
    hand-over itself, and as the transaction takes it: the lock is released at once or by the commit or the
    rollback, never left held, and released once only. An outer hold of each name by the same thread (re-entered
    by the with statement) tells: a second release would free it, a missing one would keep the name held after
    the outer release."""
    from tests.support.interrupts import Interrupted, callees_of, raise_at, traced
    from zklocks import zk_multi_lock
    from zklocks.handles import on_commit
    from zklocks.handles.locks import ZkLock
    from zklocks.handles.multilock import ZkMultiLock

    names = [f"txn-sig-{form}-{end}-a".replace(" ", "-"), f"txn-sig-{form}-{end}-b".replace(" ", "-")]
    names = names[:1] if form == "zk_lock" else names

    def make():
        if form == "zk_lock":
            return zk_lock(names[0], release_on_commit=True)
        return zk_multi_lock(names, release_on_commit=True)

    def transaction_if_any():
        return transaction.atomic() if end != "no transaction" else contextlib.nullcontext()

    exit_code = (ZkLock if form == "zk_lock" else ZkMultiLock).__exit__.__code__
    hand_over = on_commit.release_after_commit.__code__

    def cycle():
        with transaction_if_any():
            with make():
                pass

    points = [("call", hand_over, exit_code)] + [("call", code, hand_over) for code in callees_of(hand_over, cycle)]
    if end != "no transaction":
        points.append(("return", transaction.on_commit.__code__, hand_over))
    assert len(points) >= (3 if end == "no transaction" else 6), points
    wrong = []
    for event, code, caller in points:
        outer = [zk_lock(name) for name in names]
        for lock in outer:
            lock.acquire()
        handle = make()
        try:
            with transaction_if_any():
                handle.__enter__()
                tracer, seen = raise_at(code, caller=caller) if event == "call" else raise_on_return(code, caller)
                try:
                    with traced(tracer):
                        handle.__exit__(None, None, None)
                except Interrupted:
                    pass
                assert len(seen) == 1, code.co_qualname
                if end == "rollback":
                    raise RuntimeError("roll back")
        except RuntimeError:
            pass
        gc.collect()
        if not all(held_elsewhere(name) for name in names):
            wrong.append((event, code.co_qualname, "released twice"))
        if handle.is_held:
            wrong.append((event, code.co_qualname, "left on the handle"))
        for lock in outer:
            lock.release()
        if any(held_elsewhere(name) for name in names):
            wrong.append((event, code.co_qualname, "left held"))
    assert wrong == []


def test_an_exception_as_the_committing_thread_takes_the_owners_part_leaves_it_its_own_owner():
    """The release of a lock runs as its owner in whichever thread commits (owners.acting_as). An exception (a
    signal handler's) right after that thread took the owner's part, as ContextVar.set returns, leaves the thread
    its own owner: its later locks are not the other thread's holds."""
    import sys

    from tests.support.interrupts import Interrupted, after_c_call, traced
    from zklocks import owners

    def interrupt():
        raise Interrupted("injected as ContextVar.set returned")

    from zklocks.client import interrupts

    mine = owners.current_owner()
    holder = threading.Thread(target=lambda: None)
    # acting_as sets the owner through interrupts.set_within
    with traced(after_c_call("set", interrupts.set_within.__wrapped__.__code__, interrupt), install=sys.setprofile):
        with pytest.raises(Interrupted), owners.acting_as(holder):
            pass
    assert owners.current_owner() is mine
    assert not owners.acting_for_another()

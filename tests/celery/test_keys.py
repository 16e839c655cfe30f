"""Lock keys, options from settings, system checks, and eager mode (the task body runs in this process)."""

import datetime

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings

from tests.support.celery_app import rec_default_key, rec_skip, self_call
from zklocks import InvalidLockName, LockNotAcquired, ZkConfigError
from zklocks.celery import conf as celery_conf
from zklocks.execution import keys

pytestmark = pytest.mark.celery


def zk_checks():
    return [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]


def f(account_id, region="eu", *, dry_run=False):
    pass


def test_default_key_is_task_name_and_digest_of_canonical_json():
    one = keys.lock_name("app.sync", f, None, (7,), {"dry_run": False})
    # defaults applied and keywords sorted: the same call spelled differently gives the same key
    assert one == keys.lock_name("app.sync", f, None, (), {"region": "eu", "account_id": 7})
    assert one.startswith("app.sync:") and len(one.split(":", 1)[1]) == keys.DIGEST_CHARS
    assert one != keys.lock_name("app.sync", f, None, (8,), {})
    assert one != keys.lock_name("app.other", f, None, (7,), {})
    # tuples and lists are the same JSON (a broker round trip turns one into the other)
    assert keys.lock_name("t", f, None, ((1, 2),), {}) == keys.lock_name("t", f, None, ([1, 2],), {})


def test_default_key_of_a_very_long_task_name_stays_valid_and_distinct():
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    name_a = keys.lock_name(long_a, f, None, (1,), {})
    assert len(name_a) <= 200
    assert name_a != keys.lock_name(long_b, f, None, (1,), {})


def test_non_json_arguments_need_an_explicit_key():
    with pytest.raises(InvalidLockName, match=r"task 'app.sync'.*not JSON-serialisable.*explicit lock_key"):
        keys.lock_name("app.sync", f, None, (datetime.date(2024, 1, 1),), {})


def test_templates():
    assert keys.lock_name("t", f, "sync:{account_id}:{region}", (7,), {}) == "sync:7:eu"
    with pytest.raises(InvalidLockName, match=r"task 't': lock_key 'x:\{acount\}' refers to 'acount'.*account_id"):
        keys.lock_name("t", f, "x:{acount}", (7,), {})
    with pytest.raises(InvalidLockName, match=r"task 't': cannot fill lock_key 'x:\{account_id:d\}'"):
        keys.lock_name("t", f, "x:{account_id:d}", ("abc",), {})
    with pytest.raises(TypeError, match=r"task 't': the arguments \(\) \{\} do not fit"):
        keys.lock_name("t", f, "x:{account_id}", (), {})
    with pytest.raises(InvalidLockName, match=r"task 't': lock_key 'x:\{account_id\}' gives an invalid lock name"):
        keys.lock_name("t", f, "x:{account_id}", ("a\n",), {})


def test_bad_key_fails_at_enqueue_time_naming_the_task(bad_tasks):
    with pytest.raises(InvalidLockName, match="tests.support.celery_bad_tasks.bad_key_missing.*acount_id"):
        bad_tasks.bad_key_missing.delay(1)
    with pytest.raises(InvalidLockName, match="tests.support.celery_bad_tasks.bad_key_format.*cannot fill"):
        bad_tasks.bad_key_format.delay("abc")
    with pytest.raises(InvalidLockName, match="tests.support.celery_app.rec_default_key.*not JSON-serialisable"):
        rec_default_key.delay("k", extra=datetime.datetime(2024, 1, 1))


def test_options_come_from_settings_unless_set_on_the_task():
    assert rec_default_key.lock_options().on_locked == "skip"
    assert rec_default_key.lock_options().lock_timeout == 0
    with override_settings(ZKLOCKS_CELERY={"ON_LOCKED": "retry", "LOCK_TIMEOUT": 2.5, "USING": "other"}):
        opts = rec_default_key.lock_options()
        assert (opts.on_locked, opts.lock_timeout, opts.lock_using) == ("retry", 2.5, "other")
        assert rec_skip.lock_options().on_locked == "skip"  # set on the task: the setting does not apply
    assert rec_default_key.lock_options().on_locked == "skip"


def test_invalid_option_on_a_task_is_a_clear_error():
    class Broken(rec_default_key.__class__):
        on_locked = "wait"

    try:
        with pytest.raises(
            ZkConfigError, match="task 'tests.support.celery_app.rec_default_key': on_locked: must be one of"
        ):
            Broken().lock_options()
    finally:
        celery_conf.declared_task_problems.remove(
            ("tests.support.celery_app.rec_default_key", "on_locked: must be one of skip, retry, raise, not 'wait'")
        )


def test_system_checks(bad_tasks):
    with override_settings(ZKLOCKS_CELERY={"ON_LOCKED": "later", "LOCK_TIMEOUT": -1, "COLOUR": 1, "ON_LOCK": 1}):
        messages = zk_checks()
    assert messages == [
        Warning(
            "ZKLOCKS_CELERY: unknown option(s) COLOUR, ON_LOCK.",
            hint="ON_LOCK: did you mean ON_LOCKED? Known options: CONCURRENCY, DEBOUNCE, KEEP_LOCK_ON_RETRY, "
            "LOCK_TIMEOUT, MAX_HOLD, MAX_RETRIES, ON_LOCKED, ON_LOST, ON_UNAVAILABLE, RETRY_COUNTDOWN, "
            "RETRY_LOCK_GRACE, SHARE_RUNNING, THROTTLE, UNIQUE_QUEUED, UNIQUE_TIMEOUT, USING.",
            id="zklocks.W020",
        ),
        Error(
            "ZKLOCKS_CELERY: LOCK_TIMEOUT must be a number of seconds >= 0, not -1.",
            hint="Remove it to use the default (0.0).",
            id="zklocks.E020",
        ),
        Error(
            "ZKLOCKS_CELERY: ON_LOCKED must be one of skip, retry, raise, not 'later'.",
            hint="Remove it to use the default ('skip').",
            id="zklocks.E020",
        ),
        Error(
            "tests.support.celery_bad_tasks.bad_key_missing: lock_key 'bad:{acount_id}' refers to acount_id, which "
            "is not an argument of the task (arguments: account_id)",
            hint="Fix the option on the task (see the README, Celery).",
            id="zklocks.E021",
        ),
    ]
    with override_settings(ZKLOCKS_CELERY="skip"):
        assert zk_checks()[0] == Error(
            "settings.ZKLOCKS_CELERY must be a dict.",
            hint='For example ZKLOCKS_CELERY = {"ON_LOCKED": "retry"}.',
            id="zklocks.E020",
        )


@pytest.mark.zk
def test_eager_self_call_is_contention_not_reentry():
    result = self_call.apply(args=("eager-self",)).get()
    assert result["inner"] == "LockNotAcquired"
    assert result["held"] is True
    assert result["seconds"] < 1.0  # contention at once: no wait for a holder that is itself


@pytest.mark.zk
def test_eager_run_holds_the_lock_and_releases_it(zklocks_settings):
    from tests.support.helpers import raw_client
    from zklocks import lock_path, zk_lock

    result = rec_skip.apply(args=("eager-run", 0.05)).get()
    assert result["held"] is True and result["lock"] == "rec:eager-run" and result["token"] > 0
    with zk_lock("rec:eager-run", blocking=False) as lock:  # released: free again
        assert lock.token > result["token"]
    client = raw_client(zklocks_settings()["HOSTS"])
    try:
        assert client.get_children(lock_path("rec:eager-run")) == []
    finally:
        client.stop()
        client.close()
    # An execution meeting a lock held by plain code is contention too (rec_raise: on_locked="raise").
    from tests.support.celery_app import rec_raise

    with zk_lock("rec:eager-held"):
        with pytest.raises(LockNotAcquired, match="rec:eager-held"):
            rec_raise.apply(args=("eager-held",), throw=True)


@pytest.mark.zk
def test_a_soft_time_limit_as_the_marker_goes_still_releases_the_lock(zklocks_settings):
    """The soft time limit's exception lands as the run removes its unique_queued marker (a round trip, after the
    body): the task's lock is released all the same."""
    from tests.support.celery_app import unique_long
    from tests.support.interrupts import Interrupted, raise_at, traced
    from tests.support.threads import free_for_others
    from zklocks import zk_lock
    from zklocks.celery import markers
    from zklocks.celery.task import SingleExecutionTask

    tracer, seen = raise_at(markers.forget_marker.__code__, caller=SingleExecutionTask.__call__.__code__)
    unique_long.push_request(id="soft-limit-marker", is_eager=False)  # as a worker runs it: policies apply
    try:
        with pytest.raises(Interrupted), traced(tracer):
            unique_long("soft-limit", 0.01)
    finally:
        unique_long.pop_request()
    assert len(seen) == 1
    assert free_for_others(lambda: zk_lock("u:soft-limit")) is True

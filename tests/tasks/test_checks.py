"""System checks and definition-time refusals of zklocks.tasks (exact messages)."""

import pytest
from django.test import override_settings

from tests.support.djtasks_conf import IMMEDIATE, TASKS, wrapped
from tests.tasks.conftest import REQUIRES

pytestmark = [pytest.mark.timeout(30)]

pytest.importorskip(**REQUIRES, exc_type=ImportError)


@pytest.fixture
def declared():
    from zklocks.tasks import options

    options.declared_task_problems.clear()
    yield options.declared_task_problems
    options.declared_task_problems.clear()


def run():
    from zklocks.tasks.checks import check_tasks

    return [(m.id, m.msg) for m in check_tasks()]


def test_a_key_naming_a_missing_argument_is_refused_at_definition_and_reported(declared):
    from zklocks.tasks.compat import InvalidTask, task

    with override_settings(TASKS=TASKS):
        with pytest.raises(InvalidTask, match=r"lock_key 'report:\{acount_id\}' refers to acount_id"):
            task(backend="immediate", lock_key="report:{acount_id}")(module_level_task)
        with pytest.raises(InvalidTask, match=r"on_locked: must be one of skip, retry, raise, not 'drop'"):
            task(backend="immediate", on_locked="drop")(module_level_task)
        with pytest.raises(InvalidTask, match=r"on_locked='retry' enqueues the task again with run_after"):
            task(backend="immediate", on_locked="retry")(module_level_task)
        # The context is not an argument of the key.
        with pytest.raises(InvalidTask, match=r"refers to context, which is not an argument of the task"):
            task(backend="immediate", lock_key="r:{context}", takes_context=True)(context_task)
        assert run() == [
            (
                "zklocks.E111",
                "task tests.tasks.test_checks.module_level_task: lock_key 'report:{acount_id}' refers to acount_id, "
                "which is not an argument of the task (arguments: account_id)",
            ),
            (
                "zklocks.E111",
                "task tests.tasks.test_checks.module_level_task: on_locked: must be one of skip, retry, raise, "
                "not 'drop'",
            ),
            (
                "zklocks.E111",
                "task tests.tasks.test_checks.module_level_task: on_locked='retry' enqueues the task again with "
                "run_after, which this backend does not support (supports_defer is False); use 'skip' or 'raise', "
                "or a backend with deferred tasks",
            ),
            (
                "zklocks.E111",
                "task tests.tasks.test_checks.context_task: lock_key 'r:{context}' refers to context, which is not "
                "an argument of the task (arguments: account_id)",
            ),
        ]


def test_backend_options_are_checked(declared):
    ours = "zklocks.tasks.SingleExecutionBackend"
    bad = {
        "a": {"BACKEND": ours, "OPTIONS": {"BACKEND": "no.such.Backend"}},
        "b": {"BACKEND": ours, "OPTIONS": {**wrapped(IMMEDIATE)["OPTIONS"], "USING": "nope", "TIMEOUT": 1}},
        "c": {"BACKEND": ours, "OPTIONS": wrapped(ours)["OPTIONS"]},
        "d": {"BACKEND": ours, "OPTIONS": []},
    }
    with override_settings(TASKS=bad):
        messages = run()
    assert messages == [
        (
            "zklocks.E110",
            "TASKS['a']: OPTIONS['BACKEND'] 'no.such.Backend' cannot be imported (No module named 'no').",
        ),
        ("zklocks.W110", "TASKS['b']: unknown key(s) TIMEOUT in the OPTIONS of SingleExecutionBackend."),
        ("zklocks.E110", "TASKS['b']: USING='nope' is not a zklocks alias (configured: 'default')."),
        (
            "zklocks.E110",
            "TASKS['c']: OPTIONS['BACKEND'] 'zklocks.tasks.SingleExecutionBackend' is SingleExecutionBackend "
            "itself: name the backend it wraps.",
        ),
        ("zklocks.E110", "TASKS['d']: OPTIONS must be a dict, not []."),
    ]


def test_a_backend_on_a_misconfigured_alias_says_so_not_that_the_alias_is_missing(declared):
    ours = "zklocks.tasks.SingleExecutionBackend"
    with override_settings(
        ZKLOCKS={"default": {"HOSTS": "127.0.0.1:2181", "SESSION_TIMEOUT": -1}},
        TASKS={"default": {"BACKEND": ours, "OPTIONS": wrapped(IMMEDIATE)["OPTIONS"]}},
    ):
        messages = run()
    assert messages == [
        ("zklocks.E110", "TASKS['default']: USING='default' names a zklocks alias whose settings are invalid.")
    ]


def test_a_misconfigured_backend_refuses_tasks_instead_of_crashing_the_import(declared):
    from zklocks.exceptions import ZkConfigError
    from zklocks.tasks.compat import task_backends

    bad = {"default": {"BACKEND": "zklocks.tasks.SingleExecutionBackend", "OPTIONS": {}}}
    with override_settings(TASKS=bad):
        backend = task_backends["default"]
        with pytest.raises(ZkConfigError, match=r"TASKS\['default'\]: OPTIONS\['BACKEND'\] must be the dotted path"):
            backend.enqueue(None, (), {})


def test_no_single_execution_backend_means_no_messages(declared):
    with override_settings(TASKS={"default": {"BACKEND": IMMEDIATE}}):
        assert run() == []


def module_level_task(account_id):
    return account_id


def context_task(context, account_id):
    return account_id

"""`manage.py check` reports de-duplication policies with bad values (zklocks.E100) and policies that do not go
together (E101-E103, W100, W101), in a project laid out as Celery's Django guide lays it out; the same options
raise ZkConfigError when the task is used."""

import datetime

import pytest

from tests.support.project import Project

TASKS = """\
    from proj.celery import app
    from zklocks.celery import SingleExecutionTask


    @app.task(base=SingleExecutionTask, lock_key="a:{n}", throttle=0, lock_concurrency=0, debounce="soon")
    def bad_values(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="b:{n}", share_running=True, lock_concurrency=2)
    def shared_of_many(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="c:{n}", debounce=1, unique_queued=True, on_locked="retry")
    def debounced_unique(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="d:{n}", keep_lock_on_retry=True, lock_concurrency=3)
    def kept_of_many(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="e:{n}", debounce=2)
    def debounced_skip(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="f:{n}", share_running=True, unique_queued=True)
    def shared_unique(n):
        return n
"""

FINE = """\
    from proj.celery import app
    from zklocks.celery import SingleExecutionTask


    @app.task(base=SingleExecutionTask, lock_key="a:{n}", debounce=2, on_locked="retry", throttle=5)
    def debounced(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="b:{n}", share_running=True, keep_lock_on_retry=True)
    def shared(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="c:{n}", lock_concurrency=4, retry_lock_grace=5)
    def limited(n):
        return n
"""

EXPECTED = """\
SystemCheckError: System check identified some issues:

ERRORS:
?: (zklocks.E100) shop.tasks.bad_values: debounce: must be None or a number of seconds >= 0, not 'soon'
\tHINT: Fix the option on the task.
?: (zklocks.E100) shop.tasks.bad_values: lock_concurrency: must be an integer >= 1, not 0
\tHINT: Fix the option on the task.
?: (zklocks.E100) shop.tasks.bad_values: throttle: must be None or a positive number of seconds, not 0
\tHINT: Fix the option on the task.
?: (zklocks.E101) shop.tasks.shared_of_many: share_running=True with lock_concurrency=2: there is no one running execution to share.
\tHINT: Use lock_concurrency=1 with share_running, or drop share_running.
?: (zklocks.E102) shop.tasks.debounced_unique: debounce with unique_queued=True: unique_queued keeps the first queued call, debounce the latest.
\tHINT: Choose one of them.
?: (zklocks.E103) shop.tasks.kept_of_many: keep_lock_on_retry=True with lock_concurrency=3: only an exclusive lock is kept across retries.
\tHINT: Use lock_concurrency=1 with keep_lock_on_retry.

WARNINGS:
?: (zklocks.W100) shop.tasks.debounced_skip: debounce with on_locked='skip' and lock_timeout=0: the latest call is skipped when it starts while an earlier one still runs, so the latest does not always win.
\tHINT: Set on_locked="retry", or a lock_timeout longer than a run.
?: (zklocks.W101) shop.tasks.shared_unique: share_running=True with unique_queued=True: unique_queued already returns the running execution's result.
\tHINT: Drop share_running.

System check identified 8 issues (0 silenced).
"""  # noqa: E501


@pytest.mark.timeout(120)
def test_check_reports_policy_options(tmp_path):
    project = Project(tmp_path, celery=True)
    project.write("shop/tasks.py", TASKS)
    result = project.manage("check")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", EXPECTED)


@pytest.mark.timeout(120)
def test_policies_that_go_together_pass(tmp_path):
    project = Project(tmp_path, celery=True)
    project.write("shop/tasks.py", FINE)
    result = project.manage("check")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "System check identified no issues (0 silenced).\n",
        "",
    )


@pytest.mark.timeout(60)
def test_a_task_with_policies_that_do_not_go_together_refuses_to_send(celery_app):
    from zklocks.celery import SingleExecutionTask
    from zklocks.exceptions import ZkConfigError

    @celery_app.task(base=SingleExecutionTask, lock_key="x:{n}", share_running=True, lock_concurrency=2)
    def shared_of_many_here(n):
        return n

    try:
        with pytest.raises(ZkConfigError, match="share_running=True with lock_concurrency=2"):
            shared_of_many_here.delay(1)
    finally:
        from zklocks.celery import conf as celery_conf

        celery_conf.declared_task_options[:] = [
            t for t in celery_conf.declared_task_options if t[0] != shared_of_many_here.name
        ]


@pytest.mark.timeout(10)
def test_retry_delay_of_a_countdown_and_of_an_eta():
    from celery.exceptions import Retry

    from zklocks.celery.task import retry_delay

    assert retry_delay(Retry(when=2.5)) == 2.5
    assert retry_delay(Retry(when=None)) == 0.0
    eta = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    assert 29.0 < retry_delay(Retry(when=eta)) <= 30.0
    assert retry_delay(Retry(when=eta - datetime.timedelta(seconds=60))) == 0.0

"""`manage.py check` in a project laid out as Celery's Django guide lays it out (proj/celery.py with
autodiscover_tasks(), imported from proj/__init__.py): mistakes in the options of SingleExecutionTask tasks are
reported before any task runs."""

from tests.support.project import Project

TASKS = """\
    from celery import shared_task

    from proj.celery import app
    from zklocks.celery import SingleExecutionTask


    @app.task(bind=True, base=SingleExecutionTask, lock_key="sync:{acount_id}")
    def sync_account(self, account_id):
        return account_id


    @shared_task(base=SingleExecutionTask, lock_key="export:{day}", lock_timout=5, on_lock="retry")
    def export(day):
        return day


    @app.task(base=SingleExecutionTask, lock_key="fine:{n}", max_retries=3, autoretry_for=(OSError,))
    def fine(n):
        return n
"""

EXPECTED = """\
SystemCheckError: System check identified some issues:

ERRORS:
?: (zklocks.E021) shop.tasks.sync_account: lock_key 'sync:{acount_id}' refers to acount_id, which is not an argument of the task (arguments: account_id)
\tHINT: Fix the option on the task (see the README, Celery).

WARNINGS:
?: (zklocks.W021) shop.tasks.export: lock_timout=5 is not an option of SingleExecutionTask or of Celery tasks; Celery keeps it without using it.
\tHINT: Did you mean lock_timeout?
?: (zklocks.W021) shop.tasks.export: on_lock='retry' is not an option of SingleExecutionTask or of Celery tasks; Celery keeps it without using it.
\tHINT: Did you mean on_locked?

System check identified 3 issues (0 silenced).
"""  # noqa: E501


def test_check_sees_autodiscovered_tasks_and_misspelt_options(tmp_path):
    project = Project(tmp_path, celery=True)
    project.write("shop/tasks.py", TASKS)
    result = project.manage("check")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", EXPECTED)


def test_clean_project_passes(tmp_path):
    project = Project(tmp_path, celery=True)
    project.write(
        "shop/tasks.py",
        TASKS.replace("acount_id", "account_id")
        .replace("lock_timout", "lock_timeout")
        .replace("on_lock=", "on_locked="),
    )
    result = project.manage("check")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "System check identified no issues (0 silenced).\n",
        "",
    )


def test_check_runs_without_celery_installed(tmp_path):
    """A project without Celery: zklocks' checks must not import it (a sitecustomize hides it here)."""
    project = Project(tmp_path)
    project.write(
        "nocelery/sitecustomize.py",
        """\
        import sys

        class _Hide:
            def find_spec(self, name, path=None, target=None):
                if name == "celery" or name.startswith("celery."):
                    raise ModuleNotFoundError(f"No module named {name!r}")

        sys.meta_path.insert(0, _Hide())
    """,
    )
    result = project.manage("check", PYTHONPATH=f"{tmp_path / 'nocelery'}:{project.env()['PYTHONPATH']}")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "System check identified no issues (0 silenced).\n",
        "",
    )


TERMINATE_TASKS = """\
    from proj.celery import app
    from zklocks.celery import SingleExecutionTask


    @app.task(base=SingleExecutionTask, lock_key="sync:{n}", on_lost="terminate", acks_late=True,
              reject_on_worker_lost=True)
    def requeued(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="ok:{n}", on_lost="terminate", acks_late=True)
    def recorded(n):
        return n


    @app.task(base=SingleExecutionTask, lock_key="bad:{n}", on_lost="kill", max_hold=0)
    def bad(n):
        return n
"""

TERMINATE_EXPECTED = """\
SystemCheckError: System check identified some issues:

ERRORS:
?: (zklocks.E021) shop.tasks.bad: max_hold: must be None or a positive number of seconds, not 0
\tHINT: Fix the option on the task (see the README, Celery).
?: (zklocks.E021) shop.tasks.bad: on_lost: must be one of notify, cancel, terminate, not 'kill'
\tHINT: Fix the option on the task (see the README, Celery).

WARNINGS:
?: (zklocks.W080) shop.tasks.requeued: on_lost='terminate' with acks_late and reject_on_worker_lost: the task is requeued when its worker process ends for a lost lock, and runs again instead of failing with LockLost.
\tHINT: Set reject_on_worker_lost=False on the task, or use on_lost='cancel'.

System check identified 3 issues (0 silenced).
"""  # noqa: E501


def test_check_reports_on_lost_options_and_a_terminated_task_that_would_be_requeued(tmp_path):
    project = Project(tmp_path, celery=True)
    project.write("shop/tasks.py", TERMINATE_TASKS)
    result = project.manage("check")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", TERMINATE_EXPECTED)

"""The Celery app of the beat tests: ``celery -A tests.support.beat_app beat|worker``, configured from the environment.

ZKLOCKS_TEST_HOSTS (a beat behind its own proxies gets their addresses), ZKLOCKS_TEST_NAMESPACE,
ZKLOCKS_TEST_SESSION_TIMEOUT, ZKLOCKS_TEST_CONNECT_TIMEOUT, ZKLOCKS_TEST_BROKER, ZKLOCKS_TEST_RECORDS as in
tests/celery_app.py; ZKLOCKS_TEST_BEAT_SCHEDULER (ZKLOCKS_BEAT["SCHEDULER"]), ZKLOCKS_TEST_BEAT_ELECTION and,
for django-celery-beat, ZKLOCKS_TEST_BEAT_DB (an SQLite file shared by the beats); ZKLOCKS_TEST_BEAT_FENCE=1
turns on FENCE_WORKERS; ZKLOCKS_TEST_BEAT_PAUSE_FILE and _SLOW_CLOSE: see PauseBeforePublish;
ZKLOCKS_TEST_BEAT_ENTRIES, ZKLOCKS_TEST_BEAT_CATCHUP: other schedules (below);
ZKLOCKS_TEST_BEAT_SIGTERM_FILE and _AT: see sigterm_at. One entry, ``every-second``, runs
``beat_tick``, which records each execution with the ``zklocks_beat`` header the leader stamped on it.
"""

import faulthandler
import json
import logging
import os
import signal
import time
from pathlib import Path

import django
from django.conf import settings

DB = os.environ.get("ZKLOCKS_TEST_BEAT_DB")

# A failing test asks each beat still running for the stacks of its threads (SIGUSR1), into its log.
faulthandler.register(signal.SIGUSR1, all_threads=True)

if not settings.configured and "DJANGO_SETTINGS_MODULE" not in os.environ:
    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "zklocks",
            *(["django_celery_beat"] if DB else []),
        ],
        # IMMEDIATE: a transaction takes the write lock as it begins, so a writer waits for another process's
        # write (the busy timeout). Deferred, a transaction that read first (update_or_create) fails at once if
        # another process wrote meanwhile: SQLite's "database is locked", which a server database never gives.
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": DB,
                "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
            }
        }
        if DB
        else {},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        # tests/settings.py's: the aliases' identity is derived from it; the beats sign their stamps with it, the
        # fencing workers check them
        SECRET_KEY="zklocks-tests",
        ZKLOCKS={
            "default": {
                "HOSTS": os.environ.get("ZKLOCKS_TEST_HOSTS", "127.0.0.1:2181"),
                "NAMESPACE": os.environ.get("ZKLOCKS_TEST_NAMESPACE", "/zklocks-test/beat"),
                "SESSION_TIMEOUT": float(os.environ.get("ZKLOCKS_TEST_SESSION_TIMEOUT", "2.0")),
                "CONNECT_TIMEOUT": float(os.environ.get("ZKLOCKS_TEST_CONNECT_TIMEOUT", "2.0")),
                "REAP_INTERVAL": 0,
            }
        },
        ZKLOCKS_BEAT={
            "SCHEDULER": os.environ.get("ZKLOCKS_TEST_BEAT_SCHEDULER", "celery.beat:PersistentScheduler"),
            "ELECTION": os.environ.get("ZKLOCKS_TEST_BEAT_ELECTION", "celery-beat"),
            "FENCE_WORKERS": os.environ.get("ZKLOCKS_TEST_BEAT_FENCE") == "1",
        },
    )
    django.setup()

from celery import Celery  # noqa: E402
from celery.beat import PersistentScheduler  # noqa: E402

from tests.support.beat_schedules import CATCH_UP, PAUSE_LINE, SIGTERM_LINE, SLOW_CLOSE_LINE  # noqa: E402

BROKER = os.environ.get("ZKLOCKS_TEST_BROKER", "redis://127.0.0.1:6379")

app = Celery("zklocks_beat_tests")
app.conf.update(
    broker_url=f"{BROKER}/0",
    result_backend=None,
    task_ignore_result=True,
    task_default_queue="zk-beat",
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    timezone="UTC",
    beat_max_loop_interval=1,
    beat_schedule={} if DB else {"every-second": {"task": "tests.support.beat_app.beat_tick", "schedule": 1.0}},
)
if os.environ.get("ZKLOCKS_TEST_BEAT_ENTRIES"):  # JSON {name: seconds}: this beat's own beat_schedule
    app.conf.beat_schedule = {
        name: {"task": "tests.support.beat_app.beat_tick", "schedule": float(seconds)}
        for name, seconds in json.loads(os.environ["ZKLOCKS_TEST_BEAT_ENTRIES"]).items()
    }
if os.environ.get("ZKLOCKS_TEST_BEAT_CATCHUP") == "1":
    app.conf.beat_schedule = {
        name: {
            "task": "tests.support.beat_app.beat_tick",
            "schedule": 2.0,
            "options": {"zklocks_catch_up": policy} if policy else {},
        }
        for name, policy in CATCH_UP.items()
    }


@app.task(bind=True)
def beat_tick(self):
    """Record this execution: when it ran, and the leader's stamp (token, send time) from the message header."""
    stamp = getattr(self.request, "zklocks_beat", None) or (self.request.headers or {}).get("zklocks_beat")
    line = {"ran_at": time.time(), "task_id": self.request.id, "stamp": stamp, "pid": os.getpid()}
    where = os.environ.get("ZKLOCKS_TEST_RECORDS")
    if where:
        with open(Path(where) / "beat.jsonl", "a") as out:
            out.write(json.dumps(line) + "\n")
    return line


class PauseBeforePublish:
    """Once the file ZKLOCKS_TEST_BEAT_PAUSE_FILE exists, log PAUSE_LINE between the fenced claim and the publish
    of the next tick and wait a moment there, so that a test can SIGSTOP the beat exactly in that window (a GC
    pause or a stalled VM between claim and publish). And a slow close of the schedule's storage (close)."""

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        flag = os.environ.get("ZKLOCKS_TEST_BEAT_PAUSE_FILE")
        if flag and os.path.exists(flag):
            os.unlink(flag)
            logging.getLogger("celery.beat").warning("%s %s", PAUSE_LINE, entry.name)
            time.sleep(1.0)
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    def close(self):
        """ZKLOCKS_TEST_BEAT_SLOW_CLOSE=<seconds>: the schedule's storage takes that long to sync and close (a
        database busy with other work, a disk that stalls)."""
        slow = float(os.environ.get("ZKLOCKS_TEST_BEAT_SLOW_CLOSE") or 0)
        if slow:
            logging.getLogger("celery.beat").warning("%s %.1fs", SLOW_CLOSE_LINE, slow)
            time.sleep(slow)
        return super().close()


def sigterm_at(where: str, flag: str) -> None:
    """Once this beat leads and the file ``flag`` exists: a real SIGTERM to itself, once, at ``where``:

    - ``hold``: inside ``BaseHandle._hold`` with the handle's lock held (after the call of ``dict.get``, a point
      where CPython runs handlers);
    - ``claim``: as the beat starts waiting for the answer of its claim, sent already (``wait_result`` called
      from ``beat_state.record_sent``);
    - ``sync``: as the schedule's storage is synced after a publish (Celery's ``apply_async`` syncs in its
      ``finally``, at the first send and every few minutes);
    - ``finalizer``: where ``claim`` does, but from inside an object's ``__del__``, where Python prints the
      handler's SystemExit and goes on ("Exception ignored in ...").

    Celery's handler closes the scheduler right there, then raises SystemExit."""
    import inspect
    import signal
    import sys

    from celery.beat import Scheduler

    from zklocks.celery import beat_state
    from zklocks.handles.base import BaseHandle
    from zklocks.recipes import kazoo_calls

    fired = []

    def fire():
        if not fired:
            fired.append(True)
            sys.settrace(None)
            logging.getLogger("celery.beat").warning("%s (%s)", SIGTERM_LINE, where)
            if where == "finalizer":
                Dying()  # collected at once: the handler runs inside its __del__
            else:
                os.kill(os.getpid(), signal.SIGTERM)

    class Dying:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)  # os.kill runs the handler before it returns

    if where == "hold":
        code = BaseHandle._hold.__code__
        lines, first = inspect.getsourcelines(BaseHandle._hold)
        after_get = first + next(i for i, line in enumerate(lines) if "self._mine.get(owner)" in line) + 1

        def in_hold(frame, event, arg):
            if event == "line" and frame.f_lineno == after_get:
                fire()
            return in_hold

        def calls(frame, event, arg):
            if event == "call" and frame.f_code is code and not fired and os.path.exists(flag):
                return in_hold
            return None
    else:
        code, caller, outer = {  # the function, its caller, and that one's caller (None: any)
            "claim": (kazoo_calls.wait_result, beat_state.record_sent, None),
            "finalizer": (kazoo_calls.wait_result, beat_state.record_sent, None),
            "sync": (PersistentScheduler.sync, Scheduler._do_sync, Scheduler.apply_async),
        }[where]

        def calls(frame, event, arg):
            if event != "call" or frame.f_code is not code.__code__ or not os.path.exists(flag):
                return
            back = frame.f_back
            if back.f_code is caller.__code__ and (outer is None or back.f_back.f_code is outer.__code__):
                fire()

    sys.settrace(calls)


if os.environ.get("ZKLOCKS_TEST_BEAT_SIGTERM_FILE"):
    from celery.signals import beat_init

    if os.environ.get("ZKLOCKS_TEST_BEAT_SIGTERM_AT") == "sync":
        app.conf.beat_sync_every = 1  # Celery's apply_async syncs after each publish, not only every 3 minutes

    beat_init.connect(
        lambda sender, **_: sigterm_at(
            os.environ.get("ZKLOCKS_TEST_BEAT_SIGTERM_AT", "hold"), os.environ["ZKLOCKS_TEST_BEAT_SIGTERM_FILE"]
        ),
        weak=False,
    )


class PausingScheduler(PauseBeforePublish, PersistentScheduler):
    pass


if DB:
    from django_celery_beat.schedulers import DatabaseScheduler

    class PausingDatabaseScheduler(PauseBeforePublish, DatabaseScheduler):
        pass


def prepare_database() -> None:
    """Create django-celery-beat's tables in the shared SQLite file and the every-second entry (run once)."""
    from django.core.management import call_command
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    call_command("migrate", verbosity=0, interactive=False)
    from django.db import connection

    # The beats' shared database stands for a server database, where a reader never blocks a writer. In SQLite's
    # default journal it would: a leader frozen (SIGSTOP) inside a read holds the file's shared lock, and the next
    # leader's first write (django-celery-beat's default entries, at election) waits out the busy timeout. WAL is
    # kept by the file.
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=WAL")
    every, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name="every-second", defaults={"task": "tests.support.beat_app.beat_tick", "interval": every}
    )


def edit_database(action: str, name: str, period: str = "1") -> None:
    """``set NAME SECONDS``: create or change an entry running every SECONDS; ``disable NAME``: switch it off."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    if action == "disable":
        task = PeriodicTask.objects.get(name=name)
        task.enabled = False
        task.save()  # save(), as the admin does: django-celery-beat's change tracking sees it
        return
    every, _ = IntervalSchedule.objects.get_or_create(every=int(period), period=IntervalSchedule.SECONDS)
    task = PeriodicTask.objects.filter(name=name).first() or PeriodicTask(name=name)
    task.task, task.interval, task.enabled = "tests.support.beat_app.beat_tick", every, True
    task.save()


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1:
        edit_database(*sys.argv[1:])
    else:
        prepare_database()

"""The demo's Celery app and tasks, each a SingleExecutionTask.

    celery -A demo_project.tasks worker

The worker and the web server share the lock names: a task auditing "stock:tea" queues behind (or ahead of)
the web requests reserving tea, and the admin shows both in one queue.
"""

import os
import time

import django
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db.models import Count, Sum  # noqa: E402
from django.utils import timezone  # noqa: E402

from zklocks.celery import SingleExecutionTask  # noqa: E402

app = Celery("demo_project")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.task(
    name="demo.daily_report",
    bind=True,
    base=SingleExecutionTask,
    lock_key="report:daily",
    lock_timeout=60,
    on_locked="retry",
)
def daily_report(self):
    """One report at a time, across all workers: later ones wait for the running one, in order."""
    from demo_project.shop.models import Report, Reservation

    lock = self.request.zk_lock  # this execution's lock: token, is_held, ensure_held()
    time.sleep(settings.DEMO_TASK_DELAY)
    totals = Reservation.objects.aggregate(n=Count("id"), units=Sum("quantity"))
    lock.ensure_held()  # still ours before we write: a lost session raises LockLost here
    report = Report.objects.create(reservations=totals["n"], units=totals["units"] or 0, token=lock.token)
    return report.pk


@app.task(name="demo.audit_stock", base=SingleExecutionTask, lock_key="stock:{sku}", lock_timeout=60)
def audit_stock(sku):
    """Counts a product's stock under the same lock as the reservations: no reservation runs meanwhile."""
    from demo_project.shop.models import Product

    time.sleep(settings.DEMO_TASK_DELAY / 2)
    return Product.objects.filter(sku=sku).update(audited_at=timezone.now())


@app.task(name="demo.reindex", bind=True, base=SingleExecutionTask, lock_key="search:reindex", on_locked="skip")
def reindex(self):
    """A long job: it holds "search:reindex" for DEMO_LONG_HOLD seconds (120 by default), time to see it in the
    admin and force-release it there, which ends it early. While it runs, later ones are skipped."""
    from demo_project.shop.holding import hold_until_released

    return hold_until_released(self.request.zk_lock, settings.DEMO_LONG_HOLD)

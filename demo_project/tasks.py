"""The demo's Celery app and tasks, each guarded by zk_lock.

    celery -A demo_project.tasks worker

The worker and the web server share the lock names: a task auditing "stock:tea" queues behind (or ahead of)
the web requests reserving tea, and the admin shows both in one queue.
"""

import os
import time

import django
from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db.models import Count, Sum  # noqa: E402
from django.utils import timezone  # noqa: E402

from zklocks import holder, zk_lock  # noqa: E402

app = Celery("demo_project")
app.config_from_object("django.conf:settings", namespace="CELERY")


@signals.task_prerun.connect
def _remember_task(task_id=None, task=None, **kwargs):
    # Written into the lock nodes this task creates, so that the admin shows which task holds a lock.
    holder.current_task.set((task_id, task.name))


@signals.task_postrun.connect
def _forget_task(**kwargs):
    holder.current_task.set(None)


@app.task(name="demo.daily_report")
def daily_report():
    """One report at a time: later ones queue behind the running one, in order."""
    from demo_project.shop.models import Report, Reservation

    with zk_lock("report:daily", timeout=60) as lock:
        time.sleep(settings.DEMO_TASK_DELAY)
        totals = Reservation.objects.aggregate(n=Count("id"), units=Sum("quantity"))
        report = Report.objects.create(reservations=totals["n"], units=totals["units"] or 0, token=lock.token)
    return report.pk


@app.task(name="demo.audit_stock")
@zk_lock("stock:{sku}", timeout=60)
def audit_stock(sku):
    """Counts a product's stock under the same lock as the reservations: no reservation runs meanwhile."""
    from demo_project.shop.models import Product

    time.sleep(settings.DEMO_TASK_DELAY / 2)
    return Product.objects.filter(sku=sku).update(audited_at=timezone.now())

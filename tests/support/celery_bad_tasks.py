"""Tasks misconfigured on purpose (the bad lock_key tests). Workers import this module through the app's
``imports``; the test process imports it only inside the ``bad_tasks`` fixture, which forgets the problems
they declare, so other tests see clean system checks."""

from tests.support.celery_app import app
from zklocks.celery import SingleExecutionTask


@app.task(bind=True, base=SingleExecutionTask, lock_key="bad:{acount_id}")
def bad_key_missing(self, account_id):
    return "ran"


@app.task(bind=True, base=SingleExecutionTask, lock_key="bad:{n:d}")
def bad_key_format(self, n):
    return "ran"

"""A leader-elected beat in the test's own process: a Celery app on the in-memory broker with one hourly entry,
and its LeaderScheduler elected (the only candidate)."""

import uuid

from celery import Celery

from zklocks.celery.beat import LeaderScheduler


def memory_app(settings, name: str) -> Celery:
    """A Celery app ``name`` whose beat runs election ``name-<random>`` with celery.beat:Scheduler."""
    settings.ZKLOCKS_BEAT = {"ELECTION": f"{name}-{uuid.uuid4().hex[:8]}", "SCHEDULER": "celery.beat:Scheduler"}
    app = Celery(name, broker="memory://", set_as_current=False)
    app.conf.beat_schedule = {"nightly": {"task": f"{name}.nightly", "schedule": 3600.0}}
    return app


def elected(app: Celery) -> LeaderScheduler:
    beat = LeaderScheduler(app)
    beat.tick()  # the only candidate: elected at once
    assert beat.leader.is_leader
    return beat

"""System checks of ZKLOCKS_BEAT (zklocks.E030, E031, E032, E090, E091, W030): exact run_checks() output."""

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings

ZK = {"default": {"HOSTS": "127.0.0.1:2181"}, "jobs": {"HOSTS": "127.0.0.1:2181"}}


def run(beat):
    with override_settings(ZKLOCKS=ZK, ZKLOCKS_BEAT=beat):
        return [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]


def test_valid_beat_settings_pass():
    assert run({}) == []
    assert run({"SCHEDULER": "celery.beat.PersistentScheduler", "USING": "jobs", "ELECTION": "beat:eu"}) == []


def test_no_setting_no_check():
    with override_settings(ZKLOCKS=ZK):
        from django.conf import settings

        assert not hasattr(settings, "ZKLOCKS_BEAT")
        assert [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.E03")] == []


def test_scheduler_that_cannot_be_imported_or_is_no_scheduler():
    assert run({"SCHEDULER": "celery.beat:NoSuchScheduler"}) == [
        Error(
            "ZKLOCKS_BEAT: SCHEDULER='celery.beat:NoSuchScheduler' cannot be used: module 'celery.beat' has no "
            "attribute 'NoSuchScheduler'.",
            hint='Name a Celery scheduler class, e.g. "celery.beat:PersistentScheduler" or '
            '"django_celery_beat.schedulers:DatabaseScheduler" (with django_celery_beat in INSTALLED_APPS).',
            id="zklocks.E030",
        )
    ]
    (missing,) = run({"SCHEDULER": "no_such_package.schedulers:Scheduler"})
    assert missing.id == "zklocks.E030" and "No module named 'no_such_package'" in missing.msg
    (not_one,) = run({"SCHEDULER": "celery.beat:ScheduleEntry"})
    assert not_one.id == "zklocks.E030" and "is not a subclass of celery.beat.Scheduler" in not_one.msg
    (itself,) = run({"SCHEDULER": "zklocks.celery.beat:LeaderScheduler"})
    assert itself.id == "zklocks.E030" and "zklocks' own LeaderScheduler" in itself.msg
    # django-celery-beat's scheduler without its app in INSTALLED_APPS (this test project does not install it).
    (no_app,) = run({"SCHEDULER": "django_celery_beat.schedulers:DatabaseScheduler"})
    assert no_app.id == "zklocks.E030" and "INSTALLED_APPS" in no_app.msg
    (empty,) = run({"SCHEDULER": ""})
    assert empty.id == "zklocks.E030" and "must be the dotted path" in empty.msg


def test_unknown_alias_bad_election_and_unknown_key():
    assert run({"USING": "nope", "ELECTION": "", "TIMEOUT": 3}) == [
        Warning(
            "ZKLOCKS_BEAT: unknown option(s) TIMEOUT.",
            hint="Known options: CATCH_UP, ELECTION, FENCE_WORKERS, SCHEDULER, USING.",
            id="zklocks.W030",
        ),
        Error(
            "ZKLOCKS_BEAT: USING='nope' is not a zklocks alias (configured: 'default', 'jobs').",
            hint="Name one of the aliases of settings.ZKLOCKS.",
            id="zklocks.E031",
        ),
        Error(
            "ZKLOCKS_BEAT: ELECTION='' is not a valid election name (lock name must not be empty).",
            hint='Use a short name such as "celery-beat"; beats that share it elect one leader.',
            id="zklocks.E032",
        ),
    ]
    (not_dict,) = run(["SCHEDULER"])
    assert not_dict.id == "zklocks.E032" and "must be a dict" in not_dict.msg


def test_beat_on_a_misconfigured_alias_says_so_not_that_the_alias_is_missing():
    bad = {"default": {"HOSTS": "127.0.0.1:2181", "SESSION_TIMEOUT": -1}}
    with override_settings(ZKLOCKS=bad, ZKLOCKS_BEAT={}):
        beat = [m for m in checks.run_checks() if m.id == "zklocks.E031"]
    assert beat == [
        Error(
            "ZKLOCKS_BEAT: USING='default' names a zklocks alias whose settings are invalid.",
            hint="Fix settings.ZKLOCKS['default']: the zklocks errors of manage.py check say what is wrong.",
            id="zklocks.E031",
        )
    ]


@pytest.mark.timeout(30)
def test_fence_workers_must_be_a_bool():
    assert run({"FENCE_WORKERS": True}) == []
    assert run({"FENCE_WORKERS": "yes"}) == [
        Error(
            "ZKLOCKS_BEAT: FENCE_WORKERS must be True or False, not 'yes'.",
            hint="True makes workers drop a tick sent by a deposed beat leader after a newer leader's tick ran.",
            id="zklocks.E090",
        )
    ]


@pytest.mark.timeout(30)
def test_catch_up_default_must_be_a_policy():
    assert run({"CATCH_UP": "each:3"}) == []
    (bad,) = run({"CATCH_UP": "sometimes"})
    assert bad.id == "zklocks.E091" and "'sometimes' is no catch-up policy" in bad.msg


@pytest.mark.timeout(30)
def test_misspelt_catch_up_in_a_schedule_entry():
    entries = {
        "ok": {"task": "t", "schedule": 2.0, "options": {"zklocks_catch_up": "skip"}},
        "bad": {"task": "t", "schedule": 2.0, "options": {"zklocks_catch_up": "each:none"}},
        "plain": {"task": "t", "schedule": 2.0},
    }
    with override_settings(CELERY_BEAT_SCHEDULE=entries):
        (bad,) = run({})
    assert bad.id == "zklocks.E092" and "CELERY_BEAT_SCHEDULE['bad']" in bad.msg and "each:none" in bad.msg

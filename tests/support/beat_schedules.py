"""What the beat tests and their Celery app (tests/support/beat_app.py) share, without creating a Celery app in
the test process."""

PAUSE_LINE = "test: claimed, about to publish"
SIGTERM_LINE = "test: SIGTERM to itself at"
SLOW_CLOSE_LINE = "test: closing the schedule slowly:"

CATCH_UP = {  # ZKLOCKS_TEST_BEAT_CATCHUP=1: entries every 2 s, one per catch-up policy (None: the default)
    "cu-skip": "skip",
    "cu-once": None,
    "cu-each": "each:2",
    "cu-window-long": "window:60",
    "cu-window-short": "window:2",
}

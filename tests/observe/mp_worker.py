"""A process for the multiprocess metrics test: ``python -m tests.observe.mp_worker HOSTS NAMESPACE NAME``.

Acquires NAME (blocking), prints "held", waits for a line on stdin, releases and exits. PROMETHEUS_MULTIPROC_DIR
comes from the environment, as under gunicorn.
"""

import sys


def main() -> int:
    hosts, namespace, name = sys.argv[1:4]
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="zklocks-tests",  # tests/settings.py's: the aliases derive their identity from it
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        ZKLOCKS={"default": {"HOSTS": hosts, "NAMESPACE": namespace, "CONNECT_TIMEOUT": 5.0, "REAP_INTERVAL": 0}},
        USE_TZ=True,
    )
    django.setup()
    from zklocks import zk_lock

    print("waiting", flush=True)
    with zk_lock(name, timeout=30):
        print("held", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

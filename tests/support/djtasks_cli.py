"""A producer of the zklocks.tasks tests: ``python -m tests.support.djtasks_cli enqueue TASK KEY [--count N]``
prints the ids of the results it got, one JSON list; ``results`` prints every stored result. Settings:
tests.support.djtasks_settings (see there for the environment)."""

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.djtasks_settings")
    import django

    django.setup()
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["enqueue", "results"])
    p.add_argument("task", nargs="?")
    p.add_argument("key", nargs="?")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--seconds", type=float, default=0.5)
    args = p.parse_args(argv)
    if args.command == "results":
        from django_tasks_db.models import DBTaskResult

        rows = [
            {"id": str(r.id), "status": r.status, "task": r.task_path.rsplit(".", 1)[1], "args": r.args_kwargs}
            for r in DBTaskResult.objects.order_by("enqueued_at")
        ]
        print(json.dumps(rows))
        return 0
    from tests.support import djtasks

    task = getattr(djtasks, args.task)
    ids = [str(task.enqueue(args.key, seconds=args.seconds).id) for _ in range(args.count)]
    print(json.dumps(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())

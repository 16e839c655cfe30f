"""The single-execution core that Celery tasks (``zklocks.celery``) and Django's tasks (``zklocks.tasks``) share,
free of both frameworks: the lock name of a call (``keys``), the queued and running markers of the de-duplication
policies (``unique``), and the task id a holder records in its node (``holder_task``)."""

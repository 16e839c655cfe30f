"""The handles users hold: locks, read/write locks, semaphores, multi-locks and elections, with the hold registry,
the release on commit and the bridge for async callers."""

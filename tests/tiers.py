"""The two tiers of the suite (CONTRIBUTING.md, "Two tiers").

``make test`` runs the fast tier: the unit tests, the tests on the suite's shared server, and one smoke test of each
real component: a lock through an ensemble fault (test_client_partition.py), a Celery prefork worker
(test_tasks.py), beat (two real beats behind the admin's beat page), the admin in headless Chromium, Curator, and
the comparison of two systems. ``make test-all`` runs everything: the tests listed here (marked ``full`` at
collection), the stateful model (``model``) and the leftover checks of the commands (``leftovers``);
``make test-all SLOW=1`` adds the ``slow`` figure runs.

A test goes here when it repeats, at length, what a faster test of the fast tier already shows: a fault matrix,
a chaos or scale run, the same promise through more faults, or one more worker topology. Node ids are prefixes.
"""

FULL_TIER_ONLY = (
    # chaos, scale and long fault runs
    "tests/chaos/",
    "tests/locks/test_async_scale.py",
    "tests/faults/test_outage_matrix.py",
    "tests/faults/test_server_partitions.py",
    "tests/faults/test_server_start.py::test_an_ensemble",
    "tests/faults/test_server_returns_empty.py",
    "tests/faults/test_tls.py",
    "tests/recipes/test_sequence_exhaustion.py",
    "tests/locks/test_lease.py::test_a_long_hold_is_renewed_and_never_lapses",
    "tests/locks/test_lease.py::test_a_waiter_keeps_its_lease_while_it_waits",
    "tests/faults/test_reaper.py::test_background_sweep_keeps_a_node_in_use_between_sweeps",
    # beat: the fault runs and the failover figures (the fast tier keeps the deposed leader's fenced publish)
    "tests/celery/test_beat.py",
    "tests/celery/test_beat_claims.py",
    "tests/celery/test_beat_live_edits.py",
    "tests/celery/test_beat_catchup.py::test_each_catch_up_policy_after_a_failover",
    "tests/celery/test_beat_stop_anywhere.py",
    "tests/celery/test_beat_one_off.py::test_one_off_is_not_sent_again_after_its_leader_was_killed_unsynced",
    # Celery workers: the fast tier keeps test_tasks.py (a prefork worker under contention, each on_locked policy)
    # and the admin's beat page (two real beats); these run more workers through more faults
    "tests/celery/test_policies.py",
    "tests/celery/test_on_lost.py",
    "tests/celery/test_worker_faults.py",
    "tests/celery/test_unique_queued.py",
    "tests/celery/test_soft_time_limit.py",
    "tests/celery/test_chain.py",
    "tests/celery/test_pools.py",
    "tests/celery/test_beat_fence.py",
    # the comparison of all seven systems (the fast tier runs two: tests/packaging/test_compare_smoke.py)
    "tests/packaging/test_compare_smoke.py::test_compare_quick_of_every_system",
    # more worker topologies of promises the fast tier shows once
    "tests/tasks/test_db_worker.py::test_retry_enqueues_again_and_runs_after_the_holder",
    "tests/tasks/test_db_worker.py::test_unique_queued_keeps_one_row_per_key_across_producers",
    "tests/tasks/test_db_worker.py::test_a_dead_worker_does_not_block_the_key",
    # the browser's long walk through every mode (the fast tier keeps test_admin_in_a_browser)
    "tests/admin_cli/test_admin_browser.py::test_modes_kinds_long_names_and_the_release_button",
    # Curator in a JVM: the fast tier keeps the mutex both ways
    "tests/recipes/test_curator_interop.py::test_read_write_lock_excludes_curator",
    "tests/recipes/test_curator_interop.py::test_semaphore_excludes_curator",
    "tests/recipes/test_curator_interop.py::test_leader_latch_and_zk_leader_elect_one_leader_between_them",
    "tests/recipes/test_curator_interop.py::test_kazoo_layout_does_not_exclude_curator",
    # packaging and the demo in a fresh venv or a whole site
    "tests/packaging/test_wheel.py",
    "tests/admin_cli/test_demo.py",
    "tests/packaging/test_no_leftovers.py",
    # the stateful model's findings run their faults on servers of their own
    "tests/model/",
)


def in_full_tier_only(nodeid: str) -> bool:
    return nodeid.startswith(FULL_TIER_ONLY)

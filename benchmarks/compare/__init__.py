"""The comparison of zklocks with the locks users pick instead (docs/comparison.md): ``python -m benchmarks.compare``.

``stores`` starts the servers, ``locks`` holds each system's lock as its documentation says, ``workload`` runs the
contention workload and the fault schedule and finds the double holders.
"""

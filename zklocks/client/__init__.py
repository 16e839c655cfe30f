"""The ZooKeeper client side: sessions and their lease, per-alias pools, the I/O handler, multiRead, kazoo's log,
the worker threads, the hooks where sessions and locks report to observers (observe.py), and the checks of kazoo's
internals and of the servers' zoo.cfg."""

"""The pytest plugin used the way the README tells a user to: a project of its own with pytest-django, its
DJANGO_SETTINGS_MODULE and ``pytest_plugins = ["zklocks.testing.pytest_plugin"]`` in conftest.py."""

import re
import sys

from tests.support.project import ROOT, Project

USER_TESTS = """\
    import threading

    from django.conf import settings

    from zklocks import zk_lock
    from zklocks.client.pools import connections


    def test_settings_point_at_the_test_server(zklocks_settings, zk_server):
        alias = settings.ZKLOCKS["default"]
        assert alias["HOSTS"] == zk_server.hosts
        assert alias["NAMESPACE"].startswith("/zklocks-test/")
        assert (alias["SESSION_TIMEOUT"], alias["CONNECT_TIMEOUT"]) == (2.0, 2.0)


    def test_a_lock_is_exclusive(zklocks_settings):
        with zk_lock("report") as lock:
            assert lock.token > 0
            box = {}
            t = threading.Thread(target=lambda: box.setdefault("got", zk_lock("report", blocking=False).acquire()))
            t.start()
            t.join(10)
            assert box == {"got": False}


    def test_overrides_and_a_second_alias(zklocks_settings, zk_server):
        zklocks_settings(SESSION_TIMEOUT=3.0, EXTRA_ALIASES={"reports": {"HOSTS": zk_server.hosts}})
        assert settings.ZKLOCKS["default"]["SESSION_TIMEOUT"] == 3.0
        with zk_lock("nightly", using="reports"):
            assert connections["reports"].session().connected


    def test_expire_a_session(zklocks_settings, zk_server, zk_expire):
        lock = zk_lock("expiring")
        lock.acquire()
        zk_expire(zk_server.hosts, connections["default"].session())
        deadline = __import__("time").monotonic() + 10
        while lock.is_held and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.05)
        assert not lock.is_held


    def test_without_the_fixture_the_project_settings_stay(zk_server):
        assert settings.ZKLOCKS["default"]["HOSTS"] == "zk.example.invalid:2181"
"""


def test_plugin_in_a_user_project(tmp_path):
    project = Project(tmp_path, hosts="zk.example.invalid:2181")
    project.write("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = proj.settings\n")
    project.write("conftest.py", 'pytest_plugins = ["zklocks.testing.pytest_plugin"]\n')
    project.write("shop/tests.py", USER_TESTS)
    result = project.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "shop/tests.py"],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("5 passed")


def test_fixtures_are_documented_where_pytest_lists_them(tmp_path):
    project = Project(tmp_path)
    project.write("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = proj.settings\n")
    project.write("conftest.py", 'pytest_plugins = ["zklocks.testing.pytest_plugin"]\n')
    result = project.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--fixtures"], timeout=60)
    listing = result.stdout
    start = listing.index("fixtures defined from zklocks.testing.pytest_plugin")
    section = listing[start:].split("\n", 1)[1].split("\n----", 1)[0]
    assert "no docstring available" not in section, section
    for fixture in ("zk_server", "zk_ensemble", "zk_expire", "zklocks_settings"):
        assert fixture in section
    assert "settings.ZKLOCKS" in section


def example_files(document: str = "README.md") -> dict[str, str]:
    """The files of the pytest example in ``document`` (the README, or docs/testing.md), as written there: the
    ``ini`` block that starts with ``# pytest.ini`` and the ``python`` block after it, split at its ``# <path>.py``
    header comments."""
    text = (ROOT / document).read_text()
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.M | re.S)
    start = next(i for i, (lang, text) in enumerate(blocks) if lang == "ini" and text.startswith("# pytest.ini"))
    files = {"pytest.ini": blocks[start][1]}
    lang, code = blocks[start + 1]
    assert lang == "python", blocks[start + 1]
    for part in re.split(r"\n(?=# \S+\.py\b)", code):
        path = re.match(r"# (\S+\.py)\b", part)
        assert path is not None, part
        files[path.group(1).rstrip(",")] = part.rstrip("\n") + "\n"
    return files


def test_the_readme_example_runs_as_written(tmp_path):
    files = example_files()
    assert set(files) == {"pytest.ini", "conftest.py", "shop/tests.py"}, files
    project = Project(tmp_path, hosts="zk.example.invalid:2181")
    for path, text in files.items():
        project.write(path, text)
    # As a user runs it: plain pytest at the project's root, no path given.
    result = project.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b1 passed\b", result.stdout.splitlines()[-1]), result.stdout


def test_the_docs_show_the_readme_example():
    """docs/testing.md repeats the README's example: the same files, so the test above covers both."""
    assert example_files("docs/testing.md") == example_files()


def test_a_process_forked_from_the_test_run_ends_on_sigterm(monkeypatch):
    """The plugin turns SIGTERM into KeyboardInterrupt in the pytest process only: a forked child (a
    multiprocessing pool's worker) is ended by it as usual. Raised in a pool worker, the KeyboardInterrupt could
    leave the pool's cross-process lock taken, and the pool's terminate() waited for ever."""
    import os
    import signal
    import time

    from zklocks.testing import pytest_plugin

    monkeypatch.setattr(pytest_plugin, "_runner_pid", os.getpid())
    previous = signal.signal(signal.SIGTERM, pytest_plugin._terminated)
    try:
        pid = os.fork()
        if pid == 0:  # the child: only SIGTERM's default action ends it before os._exit
            try:
                time.sleep(30)
            finally:
                os._exit(7)
        time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status

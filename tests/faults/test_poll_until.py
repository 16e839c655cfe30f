"""``zklocks.testing.startup.poll_until``, the one start-and-wait loop of every server the suite and the benchmarks
start: a process that exits ends the wait at once, a timeout says so, both report the log and stop the server."""

import subprocess
import sys
import time

import pytest

from zklocks.testing.startup import ZkStartError, poll_until


def spawn(tmp_path, code: str) -> subprocess.Popen:
    log = tmp_path / "server.log"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@pytest.mark.timeout(60)
def test_an_exited_process_ends_the_wait_at_once_with_its_code_and_log(tmp_path):
    proc = spawn(tmp_path, "print('bind failed: port in use', flush=True); raise SystemExit(3)")
    stopped = []
    began = time.monotonic()
    with pytest.raises(ZkStartError) as info:
        poll_until(
            lambda: False, tmp_path / "server.log", "s did not start", 30, proc=proc, stop=lambda: stopped.append(1)
        )
    assert time.monotonic() - began < 20  # long before the 30 s timeout
    assert str(info.value).startswith("s did not start: its process exited with 3\n")
    assert "bind failed: port in use" in str(info.value)
    assert stopped == [1]


@pytest.mark.timeout(60)
def test_a_timeout_reports_the_callers_description_and_stops_the_server(tmp_path):
    proc = spawn(tmp_path, "import time; time.sleep(60)")
    try:
        with pytest.raises(ZkStartError, match=r"^s did not start within 0.5s\nstate: running$"):
            poll_until(
                lambda: False, lambda: "state: running", "s did not start within 0.5s", 0.5, proc=proc, stop=proc.kill
            )
        assert proc.wait(10) != 0  # stop() ran
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.timeout(60)
def test_ready_ends_the_wait_and_an_error_from_ready_stops_the_server(tmp_path):
    calls = []
    poll_until(lambda: calls.append(1) or len(calls) >= 3, None, "unused", 10)
    assert len(calls) == 3
    stopped = []

    def broken():
        raise ValueError("bad answer")

    with pytest.raises(ValueError, match="bad answer"):
        poll_until(broken, None, "unused", 10, stop=lambda: stopped.append(1))
    assert stopped == [1]
    missing = tmp_path / "none.log"
    with pytest.raises(ZkStartError, match="none.log: "):
        poll_until(lambda: False, missing, "no log", 0.2)

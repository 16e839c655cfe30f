"""No forged log lines: a value that comes from a client or from ZooKeeper (a request path, a queued marker's task
id) is logged through repr, so a newline in it cannot start a line of its own. The marker's case is
tests/tasks/test_immediate.py::test_a_newline_in_a_forged_records_task_id_forges_no_log_line."""

import logging

from django.test import RequestFactory

from zklocks.exceptions import ZkUnavailable
from zklocks.middleware import ZkUnavailableMiddleware


def test_a_newline_in_the_request_path_forges_no_log_line(caplog):
    caplog.set_level(logging.WARNING, logger="zklocks")
    request = RequestFactory().get("/shop/")
    request.path = "/shop/\nERROR zklocks: forged line"  # as a server may pass a decoded %0A on
    response = ZkUnavailableMiddleware(lambda r: None).process_exception(request, ZkUnavailable("down"))
    assert response.status_code == 503
    (record,) = [r for r in caplog.records if r.name == "zklocks"]
    assert "\n" not in record.getMessage()
    assert "\\nERROR zklocks: forged line" in record.getMessage()

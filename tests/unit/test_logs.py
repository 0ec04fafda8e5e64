"""How cronchain's workers log (``scheduler.workers.logs``): the path a worker serves, a
JSON line per record with an outcome's fields, and the format's setting."""

from __future__ import annotations

import json
import logging

import pytest

from cronchain.scheduler.errors import ConfigError
from cronchain.scheduler.settings import Settings
from cronchain.scheduler.workers.logs import JsonFormatter, path_of


def test_a_worker_names_its_path_by_the_queues_it_consumes():
    assert path_of({"cronchain"}, "cronchain", "cronchain.work") == "control"
    assert path_of({"cronchain.work"}, "cronchain", "cronchain.work") == "work"
    assert path_of({"cronchain", "etl", "cronchain.work"}, "cronchain", "cronchain.work") == (
        "control+work"
    )
    assert path_of({"etl"}, "cronchain", "cronchain.work") == "cronchain"


def test_a_json_line_carries_an_outcome_s_fields_and_a_traceback():
    record = logging.LogRecord(
        "cronchain.engine", logging.WARNING, "", 0, "%s FAILED", ("p/a",), None
    )
    record.__dict__ |= {"cronchain_path": "work", "job": "p/a", "attempt": 2, "duration": 1.5}
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "p/a FAILED" and line["level"] == "WARNING"
    assert (line["path"], line["job"], line["attempt"], line["duration"]) == ("work", "p/a", 2, 1.5)
    assert line["time"].endswith("+00:00")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        import sys

        failed = logging.LogRecord("x", logging.ERROR, "", 0, "broken", (), sys.exc_info())
    assert "ValueError: boom" in json.loads(JsonFormatter().format(failed))["traceback"]


def test_the_format_is_text_or_json():
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"CRONCHAIN_LOG_FORMAT": "JSON"}).log_format == "json"
    with pytest.raises(ConfigError, match="CRONCHAIN_LOG_FORMAT: must be text or json"):
        Settings.from_env({"CRONCHAIN_LOG_FORMAT": "xml"})

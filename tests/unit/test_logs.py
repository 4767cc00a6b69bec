"""The one logging setup: JSON events, secret-named keys redacted, chatty libraries quiet."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from controllers import logs

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(autouse=True)
def same_configuration_after() -> Iterator[None]:
    """Puts back the very configuration the tests run with (tests/conftest.py's), the same
    processors list included: loggers cached before these tests keep that list, and
    ``capture_logs`` in a later test of this worker captures by changing it in place. A new
    list left behind here can make such a test miss its log lines: one did once, in a mixed
    order of two workers; not reproduced since, so this is a likely cause, put right."""
    config = structlog.get_config()
    saved = {
        key: config[key]
        for key in ("processors", "logger_factory", "wrapper_class", "cache_logger_on_first_use")
    }
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers = handlers
    root.setLevel(level)


def test_debug_logging_never_lets_botocore_bodies_through() -> None:
    stream = io.StringIO()
    logs.configure("json", "debug", stream=stream)
    try:
        logging.getLogger("botocore.parsers").debug("Response body: %s", SECRET)
        logging.getLogger("urllib3.connectionpool").debug("body %s", SECRET)
        logging.getLogger("azure.identity._internal").warning("get_token failed: %s", SECRET)
        structlog.get_logger("test").debug("reconcile.done", token=SECRET, secret_access_key=SECRET)
        output = stream.getvalue()
        assert SECRET not in output
        event = json.loads(output.strip().splitlines()[-1])
        assert event["event"] == "reconcile.done"
        assert event["token"] == logs.REDACTED
    finally:
        logs.configure("json", "debug")


def test_a_call_below_the_level_returns_before_any_processor_runs() -> None:
    """Reconciles log at debug; at the deployed level (info) those calls must cost nothing: the
    processors (context merge, timestamp, redaction) are never reached. Fails with structlog's
    stdlib wrapper, which runs them all and lets logging drop the record afterwards."""
    stream = io.StringIO()
    logs.configure("json", "info", stream=stream)
    seen: list[str] = []

    def count(_: object, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        seen.append(str(event["event"]))
        return event

    try:
        structlog.configure(processors=[count, *structlog.get_config()["processors"]])
        log = structlog.get_logger("test")
        log.debug("reconcile.started")
        log.info("route.config_written")
        assert seen == ["route.config_written"]
        assert "reconcile.started" not in stream.getvalue()
        assert "route.config_written" in stream.getvalue()
    finally:
        logs.configure("json", "debug")

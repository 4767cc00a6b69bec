"""The one logging setup: JSON events, secret-named keys redacted, chatty libraries quiet."""

from __future__ import annotations

import io
import json
import logging

import structlog

from controllers import logs

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


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

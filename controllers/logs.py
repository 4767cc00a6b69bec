"""The one logging setup: structured events, one per line, JSON by default.

Everything logs through structlog; records from libraries (urllib3, kubernetes, apscheduler) are
rendered the same way. Keys that name secret material are redacted whatever their value, as a
last line of defence: code must not log secrets in the first place.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

REDACTED = "[REDACTED]"
SECRET_KEYS = frozenset(
    {
        "token",
        "access_token",
        "id_token",
        "secret",
        "client_secret",
        "password",
        "credentials",
        "apikey",
        "api_key",
        "authorization",
        "private_key",
        "data",
        "stringdata",
        "secret_access_key",
        "session_token",
    }
)

# Libraries whose debug logs carry request and response bodies — botocore's hold credentials
# — never log below WARNING, whatever --log-level says.
_QUIET = (
    "urllib3",
    "kubernetes",
    "apscheduler",
    "botocore",
    "boto3",
    "s3transfer",
    "requests",
    "google",
    "azure",
    "msal",
)
# azure-identity warns about every failed token request with the response body, over several
# lines; the policy reconciler already logs the failure with its reason (and the condition says
# it), so only its errors pass.
_ERRORS_ONLY = ("azure.identity",)


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in event:
        if key.lower() in SECRET_KEYS:
            event[key] = REDACTED
    return event


def configure(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Sets up logging for the whole process; ``fmt`` is ``json`` or ``text``."""
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be json or text, not {fmt!r}")
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # A call below the level returns at once (structlog's filtering logger): with the
        # stdlib wrapper every processor ran before logging dropped it, 25 µs a call, and
        # every reconcile logs at debug (3 µs now). The level is the one given here.
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        cache_logger_on_first_use=True,
    )
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    for name in _ERRORS_ONLY:
        logging.getLogger(name).setLevel(max(logging.ERROR, root.level))

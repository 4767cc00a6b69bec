"""The client maps a response that breaks while its body is read, or whose 2xx body is not JSON,
to ConnectionFailed (transient), like a connection that fails before the status line — and says
nothing of the body, which may be a Secret."""

from __future__ import annotations

import pytest
import urllib3

from controllers.runtime import errors, objects
from tests.support.fake_api import FakeTransport, Reply, Request, read_timeout

SECRET_BODY = b'{"kind": "Secret", "data": {"key": "c2stbGl2ZS1kby1ub3QtbG9n'


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, error=urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")),
        Reply(200, error=read_timeout()),
        Reply(200, error=ConnectionResetError(104, "Connection reset by peer")),
        Reply(200, data=SECRET_BODY),
        Reply(200, data=b"\xff\xfe not utf-8"),
        Reply(503, error=urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")),
    ],
    ids=["cut", "read-timeout", "reset", "truncated-json", "not-utf8", "cut-error-body"],
)
def test_a_broken_body_is_a_transient_connection_failure(reply: Reply) -> None:
    def fault(request: Request) -> Reply:
        return reply

    api = FakeTransport(fault=fault).client()
    with pytest.raises(errors.ConnectionFailed) as raised:
        api.get(objects.SECRETS, "s", namespace="ns")
    assert raised.value.transient
    assert raised.value.method == "GET"
    assert "c2stbGl2ZS" not in str(raised.value), "no byte of the body in the message"
    assert raised.value.__cause__ is None or not isinstance(raised.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("reply", "kind", "summary"),
    [
        (
            Reply(502, data=b"<html>upstream echoed " + SECRET_BODY, content_type="text/html"),
            errors.ServerError,
            "a 82-byte text/html body",
        ),
        (
            Reply(403, data=SECRET_BODY, content_type="application/json; charset=utf-8"),
            errors.Forbidden,
            "a 60-byte application/json body",
        ),
        (Reply(400, data=SECRET_BODY, content_type=""), errors.ApiError, "no content type"),
    ],
    ids=["html-page", "json-not-status", "untyped"],
)
def test_a_non_status_error_body_is_summarised_never_copied(
    reply: Reply, kind: type[errors.ApiError], summary: str
) -> None:
    api = FakeTransport(fault=lambda request: reply).client()
    with pytest.raises(kind) as raised:
        api.get(objects.SECRETS, "s", namespace="ns")
    assert raised.value.status == reply.status
    assert summary in str(raised.value)
    assert "c2stbGl2ZS" not in str(raised.value), "no byte of the body in the message"
    assert "echoed" not in str(raised.value)


def test_a_status_body_keeps_its_reason_and_message() -> None:
    status = b'{"kind": "Status", "code": 422, "reason": "Invalid", "message": "spec.x: Required"}'
    api = FakeTransport(fault=lambda request: Reply(422, data=status)).client()
    with pytest.raises(errors.ApiError) as raised:
        api.get(objects.SECRETS, "s", namespace="ns")
    assert raised.value.reason == "Invalid"
    assert "spec.x: Required" in str(raised.value)

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

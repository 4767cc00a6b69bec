"""What the client puts on the wire itself (it builds requests on the ApiClient's connection
pool, not through ApiClient.param_serialize): the bearer token from the configuration's hook,
called at most once a second; the default headers; the query quoted as ApiClient quotes it;
the body as JSON."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import Configuration

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from tests.support.fake_api import FakeTransport


class _CountingConfiguration:
    host = "https://fake"

    def __init__(self) -> None:
        self.calls = 0

    def get_api_key_with_prefix(self, name: str, alias: str | None = None) -> str | None:
        assert name == "BearerToken"
        self.calls += 1
        return f"Bearer token-{self.calls}"


def test_the_token_hook_runs_once_a_second_not_once_a_request() -> None:
    """Mutation caught: calling the hook per request (it re-reads the proxy environment: a
    quarter of a millisecond each)."""
    configuration = _CountingConfiguration()
    transport = FakeTransport(configuration=configuration)  # type: ignore[arg-type]
    client = transport.client()
    for i in range(50):
        transport.objects[f"/api/v1/namespaces/n/secrets/s{i}"] = {"metadata": {"name": "s"}}
        client.get(objects.SECRETS, f"s{i}", namespace="n")
    assert configuration.calls == 1
    assert {r.headers["authorization"] for r in transport.requests} == {"Bearer token-1"}


def test_headers_query_and_body_are_those_apiclient_would_send() -> None:
    transport = FakeTransport(default_headers={"User-Agent": "rotator-test"})
    client = transport.client()
    client.request(
        "POST",
        "/api/v1/namespaces/n/secrets",
        query=[("fieldManager", "rotator"), ("labelSelector", "a=b,c in (x y)")],
        body={"metadata": {"name": "s"}, "data": {"k": "dg=="}},
        content_type="application/apply-patch+yaml",
    )
    (sent,) = transport.requests
    assert sent.headers["User-Agent"] == "rotator-test"
    assert sent.headers["Content-Type"] == "application/apply-patch+yaml"
    assert sent.headers["Accept"] == "application/json"
    assert "authorization" not in sent.headers, "no token configured: none sent"
    assert sent.query == "fieldManager=rotator&labelSelector=a%3Db%2Cc%20in%20%28x%20y%29"
    assert sent.body == {"metadata": {"name": "s"}, "data": {"k": "dg=="}}
    assert json.dumps(sent.body)  # JSON: valid YAML for an apply patch


def test_a_body_is_sent_as_ascii_whatever_text_it_carries() -> None:
    """An apply body is parsed as YAML, which refuses raw C1 controls and reads U+0085 and
    U+2028 as line breaks; a condition message may quote a tenant's URL. Mutation caught:
    encoding with orjson (raw UTF-8)."""
    transport = FakeTransport()
    client = transport.client()
    message = "https://idp.example/\u0080\u0085\u2028 é"
    client.request(
        "POST",
        "/api/v1/namespaces/n/secrets",
        body={"metadata": {"name": "s"}, "status": {"conditions": [{"message": message}]}},
        content_type="application/apply-patch+yaml",
    )
    (sent,) = transport.requests
    assert sent.raw is not None
    assert sent.raw.isascii()
    assert json.loads(sent.raw)["status"]["conditions"][0]["message"] == message


def test_a_request_timeout_reaches_the_pool_as_urllib3_bounds_it() -> None:
    transport = FakeTransport()
    client = clients.Client(transport, timeout=7.5)
    transport.objects["/api/v1/namespaces/n/secrets/s"] = {"metadata": {"name": "s"}}
    client.get(objects.SECRETS, "s", namespace="n")
    assert transport.requests[0].timeout == 7.5


def test_a_token_kept_under_authorization_is_sent_as_apiclient_sends_it() -> None:
    """kubernetes' Configuration also takes the token as api_key["authorization"] (the tests'
    token clients do). Mutation caught: asking for "BearerToken" without the alias (the request
    then went out anonymous)."""
    configuration = Configuration(host="https://fake")
    configuration.api_key = {"authorization": "Bearer sekret"}
    transport = FakeTransport(configuration=configuration)  # type: ignore[arg-type]
    transport.objects["/api/v1/namespaces/n/secrets/s"] = {"metadata": {"name": "s"}}
    transport.client().get(objects.SECRETS, "s", namespace="n")
    assert transport.requests[0].headers["authorization"] == "Bearer sekret"


def test_a_failing_token_hook_is_a_connection_failure_naming_no_output() -> None:
    """An exec plugin or a token file that fails is retried like an unreachable server, and its
    output (which may hold a token) is not repeated. Mutation caught: the hook called outside the
    error mapping (a raw exception, fatal to the leader elector)."""

    class Failing(_CountingConfiguration):
        def get_api_key_with_prefix(self, name: str, alias: str | None = None) -> str | None:
            raise RuntimeError("plugin printed sk-must-not-appear")

    transport = FakeTransport(configuration=Failing())  # type: ignore[arg-type]
    with pytest.raises(errors.ConnectionFailed) as raised:
        transport.client().get(objects.SECRETS, "s", namespace="n")
    assert "RuntimeError" in str(raised.value)
    assert "sk-must-not-appear" not in str(raised.value)

"""What the client puts on the wire itself (it builds requests on the ApiClient's connection
pool, not through ApiClient.param_serialize): the bearer token from the configuration's hook,
called at most once a second; the default headers; the query quoted as ApiClient quotes it;
the body as JSON."""

from __future__ import annotations

import json

from controllers.runtime import client as clients
from controllers.runtime import objects
from tests.support.fake_api import FakeTransport


class _CountingConfiguration:
    host = "https://fake"

    def __init__(self) -> None:
        self.calls = 0

    def get_api_key_with_prefix(self, name: str) -> str | None:
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


def test_a_request_timeout_reaches_the_pool_as_urllib3_bounds_it() -> None:
    transport = FakeTransport()
    client = clients.Client(transport, timeout=7.5)  # type: ignore[arg-type]
    transport.objects["/api/v1/namespaces/n/secrets/s"] = {"metadata": {"name": "s"}}
    client.get(objects.SECRETS, "s", namespace="n")
    assert transport.requests[0].timeout == 7.5

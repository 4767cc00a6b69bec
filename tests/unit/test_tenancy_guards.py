"""The tenant-isolation guards that need no API server: names safe as path segments (with a
real HTTP server that must see no request), the Secret cache transforms, the byte-bounded body
reader, the ServiceAccount opt-in and label values for any name."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient, Configuration

from controllers.reconcilers import api, tokens
from controllers.reconcilers.cache import ownwrites, secretviews
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.informer import Informer
from rotator.observe import NoObserver

UNSAFE = ["", ".", "..", "../../victim/serviceaccounts/admin", "a/b", "a%2Fb", "a?b", "a#b", "\n"]


class _Counting(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []  # noqa: RUF012 - one test server per test, reset by the fixture

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        _Counting.seen.append(self.path)
        body = b'{"kind":"Secret","metadata":{"name":"x","resourceVersion":"1"},"data":{}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[clients.Client]:
    _Counting.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = Configuration()
    config.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield clients.Client(ApiClient(config), timeout=5)
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("name", UNSAFE)
def test_the_client_sends_no_request_for_an_unsafe_name(server: clients.Client, name: str) -> None:
    with pytest.raises(errors.InvalidName):
        server.get(objects.SECRETS, name, namespace="tenant")
    with pytest.raises(errors.InvalidName):
        server.create(
            objects.SERVICEACCOUNTS, {}, namespace="tenant", name=name, subresource="token"
        )
    with pytest.raises(errors.InvalidName):
        server.get(objects.SECRETS, "ok", namespace=name)
    assert _Counting.seen == []
    server.get(objects.SECRETS, "ok", namespace="tenant")  # positive control
    assert _Counting.seen == ["/api/v1/namespaces/tenant/secrets/ok"]


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,60}[a-z0-9])?", fullmatch=True))
def test_every_dns_subdomain_is_a_safe_segment(name: str) -> None:
    if name in (".", ".."):
        return
    assert objects.path_segment(name, "name") == name


def test_the_token_source_refuses_an_unsafe_service_account_name_without_a_request(
    server: clients.Client,
) -> None:
    source = tokens.ServiceAccountTokens(server, NoObserver())
    with pytest.raises(tokens.InvalidName) as refused:
        source.token("tenant", "../../victim/serviceaccounts/admin", audience="a", policy="p")
    assert refused.value.reason == "InvalidName"
    assert _Counting.seen == []


@pytest.mark.parametrize(
    ("annotation", "policy", "permitted"),
    [
        (None, "p", False),
        ("", "p", False),
        ("*", "p", True),
        ("p", "p", True),
        ("a, p ,b", "p", True),
        ("pp,q", "p", False),
        ("p*", "p", False),
    ],
)
def test_a_service_account_permits_only_the_policies_it_names(
    annotation: str | None, policy: str, permitted: bool
) -> None:
    md: dict[str, Any] = {"name": "sa"}
    if annotation is not None:
        md["annotations"] = {api.ALLOWED_POLICIES_ANNOTATION: annotation}
    assert tokens.permits({"metadata": md}, policy) is permitted


# --- Secret caches ----------------------------------------------------------------------------


def secret(name: str, owner: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    md: dict[str, Any] = {
        "name": name,
        "namespace": "t",
        "uid": "u",
        "resourceVersion": "7",
        "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY},
        "annotations": {"big": "x" * 1000},
        "managedFields": [{}],
    }
    if owner is not None:
        md["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": md, "data": {"k": "djE="}, **extra}


def owner(kind: str, name: str, *, controller: bool = True, version: str = api.API_VERSION) -> Any:
    return {"apiVersion": version, "kind": kind, "name": name, "uid": "o", "controller": controller}


@pytest.mark.parametrize(
    ("obj", "keeps"),
    [
        (secret("rotator-bsp-p", owner("BackendSecurityPolicy", "p")), "data"),
        (secret("rotator-route-r", owner("Route", "r")), secretviews.DATA_DIGEST),
        (secret("junk", owner("BackendSecurityPolicy", "p")), None),
        (secret("rotator-bsp-q", owner("BackendSecurityPolicy", "p")), None),
        (secret("rotator-bsp-p", owner("Route", "p")), None),
        (secret("rotator-bsp-p", owner("BackendSecurityPolicy", "p", controller=False)), None),
        (secret("rotator-bsp-p", owner("BackendSecurityPolicy", "p", version="x/v1")), None),
        (secret("rotator-bsp-p"), None),
    ],
    ids=[
        "derived",
        "route-config",
        "other-name",
        "other-owner-name",
        "other-kind",
        "not-controller",
        "other-group",
        "no-owner",
    ],
)
def test_the_managed_view_keeps_data_only_of_secrets_rotator_writes(
    obj: dict[str, Any], keeps: str | None
) -> None:
    """A derived Secret keeps its data (the route renderer reads it), a route config a digest of
    it (only compared), any other labelled Secret neither."""
    kept = secretviews.managed(obj)
    assert [k for k in ("data", secretviews.DATA_DIGEST) if k in kept] == ([keeps] if keeps else [])
    assert kept["metadata"]["resourceVersion"] == "7"
    assert "managedFields" not in kept["metadata"]
    if keeps is None:
        assert "annotations" not in kept["metadata"]


def test_a_cached_route_config_holds_exactly_the_data_it_was_written_with() -> None:
    kept = secretviews.managed(secret("rotator-route-r", owner("Route", "r")))
    assert secretviews.holds_data(kept, {"k": "djE="})
    assert not secretviews.holds_data(kept, {"k": "djI="})
    assert not secretviews.holds_data(kept, {"k": "djE=", "other": ""})
    assert not secretviews.holds_data(kept, {})
    derived = secretviews.managed(secret("rotator-bsp-p", owner("BackendSecurityPolicy", "p")))
    assert secretviews.holds_data(derived, {"k": "djE="})
    assert not secretviews.holds_data(derived, {"k": "djI="})


def test_a_route_configs_own_write_is_told_by_its_digest_and_an_edit_is_not() -> None:
    written = secret("rotator-route-r", owner("Route", "r"))
    desired = {"metadata": dict(written["metadata"]), "data": dict(written["data"])}
    writes = ownwrites.OwnWrites()
    writes.expect(desired)
    edited = secretviews.managed({**written, "data": {"k": "ZWRpdGVk"}})
    assert writes.not_echo(None, edited), "someone else's content reconciles"
    assert not writes.not_echo(None, secretviews.managed(written)), "the echo is skipped"


def test_the_all_secrets_view_keeps_identity_only() -> None:
    kept = secretviews.identity_only(secret("s", owner("Route", "r")))
    assert kept == {"metadata": {"name": "s", "namespace": "t", "resourceVersion": "7"}}


class _Bodies:
    """A client whose GETs return Secrets of a given size, counted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.gets = 0

    def get(self, resource: objects.Resource, name: str, *, namespace: str) -> dict[str, Any]:
        self.gets += 1
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
                "data": {"v": "x" * self.size}}  # fmt: skip


def reader(size: int, names: int, max_bytes: int) -> tuple[FullObjectReader, _Bodies]:
    bodies = _Bodies(size)
    informer = Informer(clients.Client(ApiClient(Configuration())), objects.SECRETS,
                        metadata_only=True)  # fmt: skip
    for i in range(names):
        informer.store.upsert(
            {"metadata": {"namespace": "t", "name": f"s{i}", "resourceVersion": "1"}}
        )
    return FullObjectReader(bodies, informer, max_bytes=max_bytes), bodies  # type: ignore[arg-type]


def test_the_body_reader_is_bounded_in_bytes_not_entries() -> None:
    full, bodies = reader(size=100_000, names=50, max_bytes=1_000_000)
    for i in range(50):
        assert full.get("t", f"s{i}") is not None
    assert full.cached_bytes <= 1_000_000
    assert full.cached_bytes > 800_000  # the budget is used, not a count
    full.get("t", "s49")
    assert bodies.gets == 50  # the newest body is served from memory


def test_a_forgotten_body_is_read_again() -> None:
    full, bodies = reader(size=10, names=2, max_bytes=1_000_000)
    assert full.get("t", "s0") is not None
    assert full.get("t", "s1") is not None
    full.forget("t", "s0")
    assert full.get("t", "s0") is not None
    assert full.get("t", "s1") is not None
    assert bodies.gets == 3  # s0 read again, s1 still kept


def test_each_body_read_is_the_callers_own() -> None:
    full, bodies = reader(size=10, names=1, max_bytes=1_000_000)
    first = full.get("t", "s0")
    assert first is not None
    first["data"]["v"] = "changed"
    again = full.get("t", "s0")
    assert bodies.gets == 1, "served from memory"
    assert again is not None
    assert again["data"]["v"] == "x" * 10


def test_the_body_reader_does_not_keep_a_body_over_a_quarter_of_its_budget() -> None:
    full, bodies = reader(size=300_000, names=1, max_bytes=1_000_000)
    assert full.get("t", "s0") is not None
    assert full.cached_bytes == 0
    full.get("t", "s0")
    assert bodies.gets == 2


# --- label values -------------------------------------------------------------------------------


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,250}[a-z0-9])?", fullmatch=True))
def test_owner_labels_fit_any_name(name: str) -> None:
    labels, annotations = api.owner_labels(api.POLICY_LABEL, name)
    value = labels[api.POLICY_LABEL]
    assert len(value) <= 63
    if value == name:
        assert annotations == {}
    else:
        assert value.startswith("sha256-")
        assert annotations == {api.OWNER_NAME_ANNOTATION: name}

"""The byte-counting proxy's reading of a request line (tests/support/apiproxy.py): the shards
benchmark's list and watch bytes per replica are only as right as this."""

from __future__ import annotations

import pytest

from tests.support.apiproxy import request_kind


@pytest.mark.parametrize(
    ("method", "target", "kind"),
    [
        ("GET", "/api/v1/secrets?limit=500", "list"),
        ("GET", "/api/v1/namespaces/a/secrets?limit=500&shardSelector=x", "list"),
        ("GET", "/api/v1/namespaces", "list"),
        ("GET", "/apis/rotator.dev/v1alpha1/backendsecuritypolicies?limit=500", "list"),
        ("GET", "/apis/rotator.dev/v1alpha1/namespaces/n/routes", "list"),
        ("GET", "/api/v1/secrets?watch=true&resourceVersion=7", "watch"),
        ("GET", "/apis/rotator.dev/v1alpha1/namespaces/n/routes?watch=1", "watch"),
        ("GET", "/api/v1/namespaces/a/secrets/s", "other"),
        ("GET", "/api/v1/namespaces/a", "other"),
        ("GET", "/apis/rotator.dev/v1alpha1/namespaces/n/routes/r/status", "other"),
        ("PATCH", "/api/v1/namespaces/a/secrets/s", "other"),
        ("POST", "/api/v1/namespaces/a/events", "other"),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/s/leases", "leases"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l", "leases"),
    ],
)
def test_a_request_is_a_list_a_watch_a_lease_or_other(method: str, target: str, kind: str) -> None:
    assert request_kind(method, target) == kind

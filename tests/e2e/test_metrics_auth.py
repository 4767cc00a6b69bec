"""/metrics as `rotator run` serves it by default: HTTPS, and only to bearer tokens the real API
server authenticates (TokenReview) and authorizes for `get /metrics` (SubjectAccessReview), with
the controller bound only by config/rbac — its metrics_auth_role is what lets it ask."""

from __future__ import annotations

import contextlib
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from controllers.runtime import client as clients
from controllers.runtime import errors, metricsauth
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.support import kube
from tests.support.controller import ControllerProcess, service_account_kubeconfig
from tests.support.polling import wait_for

READER_ROLE = manifests.NAME_PREFIX + "metrics-reader"
BINDINGS = manifests.KINDS["ClusterRoleBinding"]


def token_of(api: clients.Client, namespace: str, account: str) -> str:
    return kube.service_account_token(api, namespace, account)


def may_read_metrics(api: clients.Client, user: str) -> bool:
    review = api.create(
        metricsauth.SUBJECTACCESSREVIEWS,
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
        },
    )
    return bool(review["status"].get("allowed"))


def get(url: str, context: ssl.SSLContext | None, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=15) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def review_posts(metrics_text: str) -> float:
    """The controller's successful POSTs (``rest_client_requests_total{code="201"}``): in an
    empty namespace without leader election, only its TokenReviews and SubjectAccessReviews."""
    return sum(
        float(line.rpartition(" ")[2])
        for line in metrics_text.splitlines()
        if line.startswith("rest_client_requests_total{")
        and 'code="201"' in line
        and 'method="POST"' in line
    )


@pytest.fixture
def secure_controller(
    control_plane: LocalControlPlane,
    api: clients.Client,
    installed: None,
    namespace: str,
    tmp_path: Path,
) -> Iterator[ControllerProcess]:
    """A second `rotator run` beside the session's, as the controller's ServiceAccount, with
    the default secure metrics; it watches only the test's empty namespace and does not campaign
    for the Lease, so it reconciles nothing the session's controller owns."""
    kubeconfig = service_account_kubeconfig(control_plane, api, tmp_path / "kubeconfig")
    process = ControllerProcess(kubeconfig, tmp_path, args=("--namespace", namespace))
    process.start("--metrics-secure=true", leader_elect=False)
    yield process
    process.stop()


@pytest.fixture
def reader_binding(api: clients.Client, namespace: str) -> Iterator[str]:
    """ServiceAccount ``scraper`` of the test's namespace, bound to the metrics-reader
    ClusterRole from config/rbac, as a Prometheus would be; its user name."""
    name = f"{namespace}-metrics-reader"
    user = f"system:serviceaccount:{namespace}:scraper"
    api.create(
        BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
        },
    )
    # the authorizer sees a new binding a moment later; a deny read before is cached for 30 s
    wait_for(lambda: may_read_metrics(api, user), timeout=30, what="binding in effect")
    yield user
    with contextlib.suppress(errors.NotFound):
        api.delete(BINDINGS, name)


def test_metrics_need_a_token_allowed_to_get_metrics_and_tls(
    api: clients.Client,
    namespace: str,
    secure_controller: ControllerProcess,
    reader_binding: str,
) -> None:
    assert secure_controller.proc is not None
    port = secure_controller.proc.metrics_port
    url = f"https://127.0.0.1:{port}/metrics"
    # What a scraper that pins the certificate does (or skips verification: insecure_skip_verify)
    pinned = ssl.create_default_context(cadata=ssl.get_server_certificate(("127.0.0.1", port)))
    stranger = token_of(api, namespace, "stranger")
    scraper = token_of(api, namespace, "scraper")

    assert get(url, pinned) == (401, "Unauthorized\n")
    assert get(url, pinned, "not-a-token-the-api-server-issued") == (401, "Unauthorized\n")
    assert get(url, pinned, stranger) == (
        403,
        f"Authorization denied for user system:serviceaccount:{namespace}:stranger\n",
    )

    status, first = get(url, pinned, scraper)
    assert status == 200
    assert "# TYPE controller_runtime_reconcile_total counter" in first
    assert "# TYPE workqueue_depth gauge" in first
    # Cached: later scrapes within the minute cost the API server no review at all.
    reviews = review_posts(first)
    assert reviews >= 2  # at least this scrape's TokenReview and SubjectAccessReview
    for _ in range(3):
        status, text = get(url, pinned, scraper)
        assert status == 200
    assert review_posts(text) == reviews

    status, plain = get(f"http://127.0.0.1:{port}/metrics", None, scraper)
    assert (status, plain) == (400, "Client sent an HTTP request to an HTTPS server.\n")
    assert secure_controller.proc.http(secure_controller.proc.probe_port, "/healthz")[0] == 200

    logs = secure_controller.logs()
    for token in (stranger, scraper):
        assert token not in logs

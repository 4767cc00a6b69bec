"""/metrics through the Service config/default ships (3d), asked from a Pod in the cluster as a
scraper would: HTTPS to ``rotator-controller-manager-metrics-service.rotator-system.svc:8443``
with a ServiceAccount's bearer token. 401 without a token (or with one the API server does not
know), 403 for a ServiceAccount not bound to ``rotator-metrics-reader``, 200 once a
ClusterRoleBinding binds it — after the controller's cached denial (30 s) has run out, which is
the figure printed. The token goes to the Pod on stdin, never on a command line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest

from controllers.runtime import errors, objects
from tests.kind import install
from tests.kind.cluster import CLUSTERROLEBINDINGS, Cluster, idle_pod, running
from tests.kind.conftest import Shipped
from tests.kind.env import KindEnv
from tests.support.polling import wait_for

URL = f"https://{install.METRICS_SERVICE}.{install.NAMESPACE}.svc:8443/metrics"
SCRAPE = f"""
import ssl, sys, urllib.error, urllib.request
token = sys.stdin.read().strip()
request = urllib.request.Request({URL!r})
if token:
    request.add_header("Authorization", "Bearer " + token)
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE  # the controller's self-signed certificate
try:
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        body = answer.read().decode()
        print(answer.status, sum(1 for l in body.splitlines() if l.startswith("rotator_")))
except urllib.error.HTTPError as exc:
    print(exc.code, 0)
"""
BINDING = "kind-suite-scraper-metrics-reader"


class Scraper:
    def __init__(self, cluster: Cluster, namespace: str, pod: str) -> None:
        self._cluster, self._ns, self._pod = cluster, namespace, pod

    def get(self, token: str = "") -> tuple[int, int]:
        """(HTTP status, number of rotator_ sample lines)."""
        out = self._cluster.exec_python(self._ns, self._pod, SCRAPE, stdin=token).split()
        return int(out[0]), int(out[1])


@pytest.fixture(scope="module")
def scraper(
    kind_env: KindEnv, cluster: Cluster, shipped: Shipped, namespaces: Callable[[str], str]
) -> Iterator[Scraper]:
    namespace = namespaces("metrics")
    for account in ("scraper", "stranger"):
        cluster.api.create(
            objects.SERVICEACCOUNTS, {"metadata": {"name": account}}, namespace=namespace
        )
    cluster.api.create(
        objects.Resource("", "v1", "pods", "Pod"),
        idle_pod("scraper", kind_env.image),
        namespace=namespace,
    )
    wait_for(lambda: running(cluster, namespace, "scraper"), timeout=90, what="scraper Pod")
    yield Scraper(cluster, namespace, "scraper")
    with contextlib.suppress(errors.NotFound):
        cluster.api.delete(CLUSTERROLEBINDINGS, BINDING)


def test_metrics_through_the_service_answer_401_without_a_token_or_with_an_unknown_one(
    scraper: Scraper,
) -> None:
    assert scraper.get()[0] == 401
    assert scraper.get("not-a-token-the-api-server-issued")[0] == 401


def test_metrics_answer_403_to_a_service_account_not_bound_then_200_once_bound(
    cluster: Cluster, scraper: Scraper, figure: Callable[..., None]
) -> None:
    namespace = scraper._ns
    stranger = cluster.token(namespace, "stranger")
    token = cluster.token(namespace, "scraper")
    assert scraper.get(stranger)[0] == 403
    assert scraper.get(token)[0] == 403, "not bound yet"
    cluster.api.create(CLUSTERROLEBINDINGS, install.reader_binding(BINDING, namespace, "scraper"))
    bound = time.monotonic()

    def allowed() -> int | None:
        status, samples = scraper.get(token)
        return samples if status == 200 else None

    samples = wait_for(allowed, timeout=90, interval=1.0, what="200 for the bound ServiceAccount")
    first_200 = time.monotonic() - bound
    figure("metrics", seconds_binding_to_first_200=first_200, rotator_samples=samples)
    assert samples > 0, "the body holds rotator's metrics"
    # both replicas serve the Service; each lets the binding through once its denial expired
    wait_for(
        lambda: all(scraper.get(token)[0] == 200 for _ in range(4)),
        timeout=60,
        interval=1.0,
        what="200 from every replica behind the Service",
    )
    assert scraper.get(stranger)[0] == 403, "still not bound"

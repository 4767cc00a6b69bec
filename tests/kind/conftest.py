"""The kind suite's fixtures: one cluster (hack/e2e-kind.sh's), one rotator installation reused
by the modules in the order :data:`ORDER` gives, and the stand-ins (tests/kind/standins.py).

* ``shipped``: config/default as shipped, only the image changed — the install test (3a) and
  the metrics test (3d) use it as is.
* ``configured``: the same Deployment, with the stand-ins' patch (provider endpoints, the Azure
  CA, the pod-identity token) and debug logs (reconcile lines for the fault tests) — the chain
  (3b), alerts (tests/kind/test_alerts.py), LiteLLM and fault (3c) modules.
* The upgrade module (3e) removes that installation and installs the earlier commit's, then
  upgrades it; at the end of the session whatever is installed is removed.

Every module deletes the namespaces it made before the next begins (while the controller still
runs: an IAM-key policy's finalizer needs it). Without ``ROTATOR_KIND_KUBECONFIG`` every test
skips with the reason (:data:`tests.kind.env.MISSING`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controllers.runtime import client as clients
from tests.kind import env as kindenv
from tests.kind import figures, install
from tests.kind.chains import TEST_KEYS
from tests.kind.cluster import DEPLOYMENTS, Cluster
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.standins import StandIns, standins  # noqa: F401 - the session fixture
from tests.support import leaks

ORDER = (
    "test_install.py",
    "test_metrics.py",
    "test_kept_cluster.py",
    "test_chains.py",
    "test_alerts.py",
    "test_litellm.py",
    "test_faults.py",
    "test_upgrade.py",
)
"""Modules in the order they share the installation: as shipped, then configured, then the
upgrade's own."""
HERE = Path(__file__).parent
SAMPLES_NAMESPACE = "kind-samples"
"""Where the chain module applies config/samples: the one namespace whose policies may use the
controller's own identity (``ROTATOR_CONTROLLER_IDENTITY_NAMESPACES``, set by :func:`patch_controller`)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs the kind cluster of make e2e-kind")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the suite's tests, skips them without a cluster, and runs the modules in
    :data:`ORDER`, each test in the order it is written (after any shuffling plugin)."""
    mine = [i for i in items if Path(str(i.fspath)).parent == HERE]
    if not mine:
        return
    missing = kindenv.from_environment() is None
    for item in mine:
        item.add_marker(pytest.mark.kind)
        if missing:
            item.add_marker(pytest.mark.skip(reason=kindenv.MISSING))

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = Path(str(item.fspath)).name
        return (ORDER.index(name) if name in ORDER else len(ORDER), item.location[1] or 0)

    others = [i for i in items if i not in mine]
    items[:] = others + sorted(mine, key=rank)


@pytest.fixture(scope="session")
def kind_env() -> kindenv.KindEnv:
    found = kindenv.from_environment()
    if found is None:
        pytest.skip(kindenv.MISSING)
    return found


@pytest.fixture(scope="session")
def cluster(kind_env: kindenv.KindEnv) -> Cluster:
    made = Cluster(kind_env.kubeconfig, kind_env.node)
    if made.get(DEPLOYMENTS, install.DEPLOYMENT, install.NAMESPACE) is not None:
        pytest.fail(
            f"{install.NAMESPACE} already holds {install.DEPLOYMENT}: the suite installs, breaks "
            "and removes its own; run it on a cluster of its own (make e2e-kind creates one)"
        )
    return made


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> clients.Client:
    return cluster.api


@pytest.fixture(scope="session")
def controller_logs(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerLogs]:
    logs = ControllerLogs(
        cluster, install.NAMESPACE, install.SELECTOR, tmp_path_factory.mktemp("controller-logs")
    )
    yield logs
    logs.stop()


@pytest.fixture(scope="session")
def installation(cluster: Cluster) -> Iterator[install.Installation]:
    made = install.Installation(cluster)
    yield made
    made.remove()


@dataclass(frozen=True)
class Shipped:
    docs: list[dict[str, Any]]
    seconds_to_ready: float
    """From the start of ``kubectl apply`` to both replicas Ready."""


@pytest.fixture(scope="session")
def shipped(
    kind_env: kindenv.KindEnv,
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
) -> Shipped:
    docs = install.render(cluster, install.SHIPPED, kind_env.image)
    seconds = installation.install(docs)
    controller_logs.follow()
    return Shipped(docs, seconds)


@dataclass(frozen=True)
class Configured:
    standins: StandIns
    docs: list[dict[str, Any]]


@pytest.fixture(scope="session")
def configured(
    kind_env: kindenv.KindEnv,
    cluster: Cluster,
    shipped: Shipped,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    standins: StandIns,  # noqa: F811 - the fixture imported above
) -> Iterator[Configured]:
    """The shipped Deployment pointed at the stand-ins, logging at debug. At the end of the
    session, no controller container's log (every incarnation followed, the upgrade's too)
    holds a value the stand-ins minted or were given."""
    docs = install.render(cluster, install.OVERLAYS / "debug-logs", kind_env.image)
    cluster.apply(docs)
    patch_controller(cluster, standins)
    installation.wait_rolled_out()
    controller_logs.follow()
    yield Configured(standins, docs)
    scan_logs(controller_logs, standins)
    check_certificates_made_apart(controller_logs)


def patch_controller(cluster: Cluster, standins: StandIns) -> None:  # noqa: F811
    """The stand-ins' patch, listing the samples' namespace for controllerIdentity."""
    patch = standins.controller_patch(identity_namespaces=SAMPLES_NAMESPACE)
    cluster.api.patch(
        DEPLOYMENTS,
        install.DEPLOYMENT,
        patch,
        namespace=install.NAMESPACE,
        patch_type=clients.PatchType.STRATEGIC,
    )


@pytest.fixture(scope="module")
def namespaces(cluster: Cluster) -> Iterator[Callable[[str], str]]:
    """Makes namespaces for a module (``kind-<what>-<hex>``); deletes them, waiting until they
    are gone, when the module ends."""
    made: list[str] = []

    def make(what: str) -> str:
        name = f"kind-{what}-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(name)
        made.append(name)
        return name

    yield make
    for name in made:
        cluster.delete_namespace(name)


def scan_logs(logs: ControllerLogs, standins: StandIns) -> None:  # noqa: F811
    """No value the stand-ins minted or were given, nor an API key a test wrote, is in any
    followed controller log."""
    scanner = leaks.Scanner({"the stand-ins": standins.issued(), "the tests' API keys": TEST_KEYS})
    found = [
        f"{name}: {leak}"
        for name, text in logs.all_text().items()
        for leak in scanner.leaks({"log": text})
    ]
    assert not found, found


def check_certificates_made_apart(logs: ControllerLogs) -> None:
    """Every controller that served its metrics with a self-signed certificate (config/default's
    HTTPS) made it in a child process, as its image runs (``tlsserving.self_signed_pem``): none
    fell back to making it in the process, which would keep ``cryptography`` resident."""
    texts = logs.all_text()
    served = [name for name, text in texts.items() if '"certificate": "self-signed"' in text]
    assert served, "positive control: a controller served a self-signed certificate"
    fell_back = [name for name, text in texts.items() if "tls.self_signed_in_process" in text]
    assert not fell_back, fell_back


FIGURES = pytest.StashKey[list[str]]()
"""The figures the session measured, for :func:`pytest_terminal_summary`."""


@pytest.fixture
def figure(
    request: pytest.FixtureRequest, record_testsuite_property: figures.Record
) -> Callable[..., None]:
    """``figure(name, key=value, ...)``: prints a measured figure, records it as a property
    of the test suite in the junit XML (tests/kind/figures.py; a test case's own properties
    are not in pytest's default xunit2 format), and lists it at the end of the run, so that a
    run without ``-s`` (``.ci/run``'s) shows every figure too."""

    def report(name: str, **values: Any) -> None:
        text = figures.report(record_testsuite_property, name, **values)
        request.config.stash.setdefault(FIGURES, []).append(text)

    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    measured = config.stash.get(FIGURES, [])
    if measured:
        terminalreporter.section("kind figures")
        for text in measured:
            terminalreporter.write_line(text)

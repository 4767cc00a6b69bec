"""The real control plane for end-to-end tests: one per session, a fresh namespace per test."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import (
    SERVICE_ACCOUNT_ISSUER,
    ControlPlaneOptions,
    LocalControlPlane,
)
from rotator_devkit.devenv.standins.azure import AzureStandIn, tls_context
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.iam import IAMProxy
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.support import audit, leaks
from tests.support.chain import AWSChain, Chain
from tests.support.controller import (
    ControllerProcess,
    install_crds,
    install_rbac,
    service_account_kubeconfig,
)
from tests.support.existing import existing_cluster, live_controller_paused

ROLE_ARN = "arn:aws:iam::123456789012:role/bedrock"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


EXISTING = os.environ.get("ROTATOR_E2E_KUBECONFIG")
"""Run the suite against an existing cluster (kind) instead of a local control plane."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    if EXISTING and item.get_closest_marker("local_control_plane"):
        pytest.skip("needs the local control plane (its etcd, audit log or binaries)")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    if EXISTING:
        yield existing_cluster(Path(EXISTING), tmp_path_factory.mktemp("existing"))  # type: ignore[misc]
        return
    folder = assets.find()  # fails with a clear message when KUBEBUILDER_ASSETS is not set
    started = time.monotonic()
    cp = LocalControlPlane(folder, ControlPlaneOptions(audit_policy=audit.POLICY)).start()
    print(f"\ncontrol plane up in {time.monotonic() - started:.1f} s at {cp.server}")
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def private_control_plane() -> Iterator[LocalControlPlane]:
    """A control plane of the test's own, for tests that stop or break it."""
    if EXISTING:
        pytest.skip("needs a local control plane")
    with LocalControlPlane(assets.find()) as cp:
        yield cp


@pytest.fixture(scope="session")
def api(control_plane: LocalControlPlane) -> clients.Client:
    return clients.Client(restconfig.load(str(control_plane.kubeconfig)))


@pytest.fixture
def namespace(api: clients.Client) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    api.create(objects.NAMESPACES, {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(errors.NotFound):
        api.delete(objects.NAMESPACES, name)


@pytest.fixture(scope="session")
def audit_log(control_plane: LocalControlPlane) -> audit.AuditLog:
    if EXISTING:
        pytest.skip("needs the local control plane's audit log")
    return audit.AuditLog(control_plane.audit_log)


@pytest.fixture(scope="session")
def installed(control_plane: LocalControlPlane, api: clients.Client) -> None:
    """The CRDs and the controller's RBAC, from config/."""
    install_crds(api)
    install_rbac(api)


@pytest.fixture(scope="session")
def moto() -> Iterator[str]:
    """moto in server mode on loopback: STS and IAM."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def oidc_issuer() -> Iterator[OIDCIssuer]:
    issuer = OIDCIssuer().start()
    leaks.MINTED.add_source("the OIDC issuer", issuer.issued_values)
    yield issuer
    issuer.stop()


@pytest.fixture(scope="session")
def cluster_jwks(api: clients.Client) -> dict[str, Any]:
    """The keys the API server signs ServiceAccount tokens with, which the stand-ins trust."""
    jwks: dict[str, Any] = api.request("GET", "/openid/v1/jwks", accept="application/jwk-set+json")
    return jwks


@pytest.fixture(scope="session")
def sts(moto: str, oidc_issuer: OIDCIssuer, cluster_jwks: dict[str, Any]) -> Iterator[STSProxy]:
    """STS as the controller sees it: moto behind a proxy that checks web identity tokens (from
    the OIDC issuer and from the API server's service-account issuer), shortens sessions, and
    checks the signatures of other calls (GetCallerIdentity) against what it and the IAM proxy
    issued — so "the credential works" means the secret key and session token are right."""
    proxy = STSProxy(moto, lifetime=60).start()
    leaks.MINTED.add_source("the STS stand-in", proxy.issued_values)
    proxy.trust(oidc_issuer.issuer, oidc_issuer.jwks(), "sts.amazonaws.com")
    proxy.trust(SERVICE_ACCOUNT_ISSUER, cluster_jwks, "sts.amazonaws.com")
    proxy.roles.add(ROLE_ARN)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def iam_proxy(moto: str, sts: STSProxy) -> Iterator[IAMProxy]:
    """IAM as the controller sees it: moto behind a proxy that records the keys CreateAccessKey
    returns, for the STS proxy's signature checks (tests administer moto directly)."""
    proxy = IAMProxy(moto, sts.keyring).start()
    leaks.MINTED.add_source("the IAM stand-in", proxy.issued_values)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def gcp(oidc_issuer: OIDCIssuer, cluster_jwks: dict[str, Any]) -> Iterator[GCPStandIn]:
    """Google STS, IAM credentials and OAuth token endpoints; trusts the OIDC issuer and the API
    server's service-account issuer."""
    standin = GCPStandIn(lifetime=60).start()
    leaks.MINTED.add_source("the GCP stand-in", standin.issued_values)
    standin.trust.add(oidc_issuer.issuer, oidc_issuer.jwks())
    standin.trust.add(SERVICE_ACCOUNT_ISSUER, cluster_jwks)
    yield standin
    standin.stop()


@pytest.fixture(scope="session")
def azure(
    oidc_issuer: OIDCIssuer,
    cluster_jwks: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AzureStandIn]:
    """Azure AD's v2 token endpoint over HTTPS (``azure.ca_file`` trusts it)."""
    context, ca_file = tls_context(tmp_path_factory.mktemp("azure-tls"))
    standin = AzureStandIn(context, ca_file, lifetime=60).start()
    leaks.MINTED.add_source("the Azure stand-in", standin.issued_values)
    standin.trust.add(oidc_issuer.issuer, oidc_issuer.jwks())
    standin.trust.add(SERVICE_ACCOUNT_ISSUER, cluster_jwks)
    yield standin
    standin.stop()


@pytest.fixture(scope="session")
def no_other_controller(api: clients.Client) -> Iterator[None]:
    """On a kept cluster, its own rotator Deployment is paused while the suite's controller leads,
    and put back as found afterwards (tests/support/existing.py)."""
    if not EXISTING:
        yield
        return
    with live_controller_paused(api):
        yield


@pytest.fixture(scope="session")
def controller(
    control_plane: LocalControlPlane,
    api: clients.Client,
    installed: None,
    no_other_controller: None,
    moto: str,
    sts: STSProxy,
    iam_proxy: IAMProxy,
    gcp: GCPStandIn,
    azure: AzureStandIn,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControllerProcess]:
    """``rotator run`` as the controller's ServiceAccount, shared by the chain tests; AWS calls
    go to the STS and IAM proxies in front of moto."""
    workdir = tmp_path_factory.mktemp("controller")
    kubeconfig = service_account_kubeconfig(control_plane, api, workdir / "kubeconfig")
    env = {
        "AWS_ENDPOINT_URL_STS": sts.url,
        "AWS_ENDPOINT_URL_IAM": iam_proxy.url,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "ROTATOR_GCP_STS_ENDPOINT": gcp.sts_url,
        "ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT": gcp.url,
        "ROTATOR_AZURE_AUTHORITY_HOST": azure.authority_host,
        "REQUESTS_CA_BUNDLE": str(azure.ca_file),
    }
    # the OIDC issuer stand-ins are http: allowed here, as in rotator dev
    args = ("--iam-key-grace-period", "5", "--allow-insecure-oidc-issuers")
    process = ControllerProcess(kubeconfig, workdir, env=env, args=args)
    process.start()
    yield process
    if process.proc is not None:
        process.stop()


@pytest.fixture(scope="session")
def controller_log_tail() -> leaks.LogTail:
    """How far the shared controller's logs were scanned for leaks."""
    return leaks.LogTail()


@pytest.fixture
def chain(
    api: clients.Client,
    namespace: str,
    controller: ControllerProcess,
    controller_log_tail: leaks.LogTail,
) -> Iterator[Chain]:
    """A chain builder in a fresh namespace; afterwards, no secret value may appear in the
    controller's logs (what they gained since the last scan: a value cannot be logged before it
    exists), its metrics, the namespace's Events or any status. The values are the chain's own
    and every one the stand-ins minted or were given in the whole run (tests/support/leaks.py:
    session tokens and secret keys, IAM secret keys, Google and Azure access tokens, OIDC tokens
    and client secrets, the ServiceAccount tokens presented to them), which most tests never
    see. Route configs carry credentials by design and are not scanned.

    Mutation-tested (controllers/reconcilers/policy.py, each caught here): the minted data
    logged as ``detail=`` in ``policy.credentials_minted`` (test_aws.py metrics test: STS secret
    key and session token; test_iam_keys.py management-secret test: IAM secret key;
    test_gcp_azure.py GCP outage test: GCP token — the end-of-run scan caught them too); a token
    in the Ready condition message (test_gcp_azure.py Azure outage test: status and Events); in
    the CredentialsRotated Event (test_aws.py rotation-request test); in a metric label
    (test_aws.py restart test). The metrics, GCP, Azure and restart tests register none of
    those values themselves: a scan of registered values alone could not catch them."""
    assert controller.proc is not None
    assert controller.proc.popen.poll() is None, (
        f"the controller exited: {controller.logs()[-3000:]}"
    )
    built = AWSChain(api, namespace)
    yield built
    metrics = ""
    if controller.proc is not None:
        metrics = controller.proc.http(controller.proc.metrics_port, "/metrics")[1]
    logs = controller_log_tail.new_text(controller.workdir.glob("controller-*.log"))
    found = built.leaks(logs, metrics=metrics)
    assert not found, found


@pytest.fixture(scope="session", autouse=True)
def no_leak_in_any_controller_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the run, every controller log of the session (the shared controller's, and
    those of replicas, namespaced and lossy controllers that no chain fixture scans) holds none
    of the values the stand-ins minted or were given. (Values tests chose stay with their own
    chain's scan: a human-chosen string may legitimately occur in another test's log.)
    Mutation-tested: the ``detail=`` log mutation in the chain fixture's docstring failed here
    too."""
    yield
    values = leaks.MINTED.values()
    if not any(values.values()):
        return
    scanner = leaks.Scanner(values)
    found = [
        f"{path.name} in {path.parent.name}: {leak}"
        for path in sorted(tmp_path_factory.getbasetemp().rglob("controller-*.log"))
        for leak in scanner.leaks({"log": path.read_text(errors="replace")})
    ]
    assert not found, found

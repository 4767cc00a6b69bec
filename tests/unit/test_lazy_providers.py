"""The cloud SDKs load on first use (issue 13): ``rotator run`` starts without boto3, botocore,
azure-identity, MSAL or rotator's google-auth minting modules; a policy loads its own cloud's
SDK only, when it is reconciled; the questions the index and the reconciler ask of every policy
(``secret_refs``, ``calls_provider``…) and copying a credential load nothing; and two workers
wanting the same client build it once.

Start-up is checked in a fresh interpreter (this one has every SDK loaded by other tests),
through ``controllers.cli._run`` — the path ``rotator run`` takes — against an API server
address nothing listens on: construction connects to nothing, and the manager, asked to stop
before it starts, starts and stops."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

import pytest

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource
from controllers.reconcilers.credentialsources.azure import AzureCredentialsSource
from controllers.reconcilers.credentialsources.gcp import GCPCredentialsSource
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import errors, oidc
from rotator.lazy import Lazy
from rotator.providers.gcp.endpoints import Endpoints
from rotator_devkit.controlplane.cluster import free_port
from tests.support.polling import wait_for
from tests.support.refusing import refusing

REPO = Path(__file__).resolve().parents[2]

SDK_MODULES = (
    "boto3",
    "botocore",
    "azure.identity",
    "azure.core",
    "msal",
    # google-auth's core is the kubernetes client's (its GCP auth plugin): only what rotator adds
    "google.auth.identity_pool",
    "google.auth.impersonated_credentials",
    "rotator.providers.aws.clients",
    "rotator.providers.aws.identity",
    "rotator.providers.azure",
    "rotator.providers.gcp.common",
    "rotator.providers.gcp.adc",
    "rotator.providers.gcp.federation",
    "rotator.providers.gcp.keyfile",
)

START = """
import json, sys, threading
from controllers import cli

kubeconfig, watched = sys.argv[1], sys.argv[2].split(",")
def loaded():
    return [m for m in watched if m in sys.modules]

args = cli.build_parser().parse_args(
    ["run", "--kubeconfig", kubeconfig, "--metrics-bind-address", "0",
     "--health-probe-bind-address", "0", "--controller-identity-namespaces", "*"]
)
stop = threading.Event()
stop.set()  # the manager starts and stops at once
managers = []
code = cli._run(args, kubeconfig=kubeconfig, attach=managers.append, stop=stop)
at_start = loaded()
"""

START_ONLY = """
# the positive control: these names are what the providers import
import rotator.providers.aws.identity, rotator.providers.azure
import rotator.providers.gcp.adc, rotator.providers.gcp.federation, rotator.providers.gcp.keyfile
print(json.dumps({"code": code, "managers": len(managers), "at_start": at_start,
                  "after_import": loaded()}))
"""

ONE_POLICY_EACH = """
import base64, prometheus_client
from controllers.reconcilers import setup
from controllers.reconcilers.credentialsources import SourceContext
from controllers.reconcilers.metrics import CredentialMetrics

# the sources as register builds them, on the manager cli._run built
options = setup.ChainOptions(
    azure_authority_host=sys.argv[3], controller_identity_namespaces=frozenset({"*"})
)
metrics = CredentialMetrics(prometheus_client.CollectorRegistry())
sources = setup.credential_sources(managers[0], metrics, options)
keys = "[default]\\naws_access_key_id = AKIAEXAMPLE\\naws_secret_access_key = s\\n"
data = {"api": {"apiKey": "k"}, "aws": {"credentials": keys},
        "azure": {"secret": "s"}, "gcp": {"key.json": "not json"}}
def secret(name):
    return {k: base64.b64encode(v.encode()).decode() for k, v in data[name].items()}

def obtain(spec):
    policy = {"metadata": {"name": "p", "namespace": "team", "uid": "u"}, "spec": spec}
    try:
        sources[spec["type"]].obtain(SourceContext(policy, secret, now=1.0))
        error = None
    except Exception as exc:
        error = [type(exc).__name__, getattr(exc, "reason", None),
                 getattr(exc, "transient", None)]
    return {"error": error, "loaded": loaded()}

file = {"secretRef": {"name": "aws", "key": "credentials"}, "profile": "default"}
steps = {
    "copies": [
        obtain({"type": "APIKey", "apiKey": {"secretRef": {"name": "api", "key": "apiKey"}}}),
        obtain({"type": "AWSCredentials",
                "awsCredentials": {"region": "us-east-1", "credentialsFile": file}}),
    ],
    "aws": obtain({"type": "AWSCredentials", "awsCredentials": {
        "region": "us-east-1", "credentialsFile": file,
        "assumeRole": {"roleArn": "arn:aws:iam::1:role/r", "sessionDuration": "15m"}}}),
    "azure": obtain({"type": "AzureCredentials", "azureCredentials": {
        "tenantID": "t", "clientID": "c", "scope": "s/.default",
        "clientSecretRef": {"name": "azure", "key": "secret"}}}),
    "gcp": obtain({"type": "GCPCredentials", "gcpCredentials": {
        "projectName": "p", "region": "r",
        "credentialsFile": {"secretRef": {"name": "gcp", "key": "key.json"}}}}),
    # the controller's own identity: botocore's chain, Google's ADC; none in this environment
    "aws_identity": obtain({"type": "AWSCredentials", "awsCredentials": {
        "region": "us-east-1", "controllerIdentity": {},
        "assumeRole": {"roleArn": "arn:aws:iam::1:role/r", "sessionDuration": "15m"}}}),
    "gcp_adc": obtain({"type": "GCPCredentials", "gcpCredentials": {
        "projectName": "p", "region": "r", "controllerIdentity": {}}}),
}
print(json.dumps({"at_start": at_start, **steps}))
"""


def run_probe(tmp_path: Path, script: str, *extra: str) -> dict[str, Any]:
    """Runs ``script`` in a fresh interpreter against an API server address where nothing
    listens, the clouds' endpoints unreachable too; returns what it printed (JSON)."""
    nowhere = f"127.0.0.1:{free_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://{nowhere}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
    env.update(
        AWS_ENDPOINT_URL=f"http://{nowhere}",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        GCE_METADATA_HOST=nowhere,
        GCE_METADATA_IP=nowhere,
        GCE_METADATA_DETECT_RETRIES="1",
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
        NO_PROXY="127.0.0.1",
        no_proxy="127.0.0.1",
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(kubeconfig), ",".join(SDK_MODULES), nowhere, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return cast(dict[str, Any], json.loads(done.stdout.strip().splitlines()[-1]))


def test_rotator_run_imports_no_cloud_sdk_at_start_up(tmp_path: Path) -> None:
    seen = run_probe(tmp_path, START + START_ONLY)
    assert seen["managers"] == 1  # the chain was built
    assert seen["code"] == 0
    assert seen["at_start"] == []
    assert seen["after_import"] == list(SDK_MODULES)  # the names watched are the right ones


def test_a_policy_loads_its_own_cloud_sdk_only_and_fails_as_before(tmp_path: Path) -> None:
    seen = run_probe(tmp_path, START + ONE_POLICY_EACH)
    assert seen["at_start"] == []
    assert seen["copies"] == [{"error": None, "loaded": []}, {"error": None, "loaded": []}]

    aws = seen["aws"]  # STS unreachable: retried, under the chain's own reason
    assert aws["error"] == ["AssumeRoleUnavailable", "AssumeRoleFailed", True]
    assert {"boto3", "botocore", "rotator.providers.aws.clients"} <= set(aws["loaded"])
    assert not [m for m in aws["loaded"] if m.startswith(("azure", "msal", "rotator.providers.g"))]

    azure = seen["azure"]  # Azure AD unreachable: retried
    assert azure["error"] == ["ProviderUnavailable", "ProviderUnavailable", True]
    assert {"azure.identity", "msal", "rotator.providers.azure"} <= set(azure["loaded"])
    assert not [m for m in azure["loaded"] if m.startswith("rotator.providers.gcp")]

    gcp = seen["gcp"]  # a key that is not JSON: refused before any call, as before
    assert gcp["error"] == ["InvalidInput", "InvalidSecretData", False]
    assert "rotator.providers.gcp.keyfile" in gcp["loaded"]
    # the controller's ADC (and its impersonation) is built only for a controllerIdentity policy
    assert "rotator.providers.gcp.adc" not in gcp["loaded"]
    assert "rotator.providers.aws.identity" not in gcp["loaded"]

    identity = seen["aws_identity"]  # botocore's default chain, built for it: finds nothing
    assert identity["error"] == ["NoIdentity", "ControllerIdentityNotFound", False]
    assert "rotator.providers.aws.identity" in identity["loaded"]
    adc = seen["gcp_adc"]  # no metadata server answers: retried
    assert adc["error"] == ["ProviderUnavailable", "ProviderUnavailable", True]
    assert "rotator.providers.gcp.adc" in adc["loaded"]


def never() -> NoReturn:
    raise AssertionError("a provider client was built")


def context(spec: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]]) -> SourceContext:
    policy = {"metadata": {"name": "p", "namespace": "team", "uid": "u"}, "spec": spec}
    return SourceContext(cast(api.Policy, policy), secrets.get, now=1.0)


AWS_FILE = {
    "region": "us-east-1",
    "credentialsFile": {"secretRef": {"name": "aws", "key": "credentials"}, "profile": "default"},
}
SPECS: dict[str, list[dict[str, Any]]] = {
    "AWSCredentials": [
        AWS_FILE,
        {**AWS_FILE, "assumeRole": {"roleArn": "arn:aws:iam::1:role/r", "sessionDuration": "1h"}},
        {"region": "us-east-1", "controllerIdentity": {}, "assumeRole": {"roleArn": "r"}},
        {
            "region": "us-east-1",
            "iamAccessKey": {
                "secretRef": {"name": "admin", "key": "credentials"},
                "userName": "u",
                "rotationInterval": "24h",
            },
        },
    ],
    "GCPCredentials": [
        {"credentialsFile": {"secretRef": {"name": "gcp", "key": "key.json"}}},
        {"controllerIdentity": {}},
    ],
    "AzureCredentials": [
        {"scope": "s", "clientSecretRef": {"name": "azure", "key": "secret"}},
        {"scope": "s", "controllerIdentity": {}},
    ],
}
FIELD = {
    "AWSCredentials": "awsCredentials",
    "GCPCredentials": "gcpCredentials",
    "AzureCredentials": "azureCredentials",
}


def unbuilt_sources() -> dict[str, CredentialSource]:
    """Each cloud's source with clients whose build fails the test."""
    tokens: Any = None
    return {
        "AWSCredentials": AWSCredentialsSource(
            clients=Lazy(never), tokens=tokens, service_accounts=tokens
        ),
        "GCPCredentials": GCPCredentialsSource(
            transport=Lazy(never),
            endpoints=Endpoints(),
            tokens=tokens,
            service_accounts=tokens,
            application_default=Lazy(never),
        ),
        "AzureCredentials": AzureCredentialsSource(
            azure=Lazy(never), tokens=tokens, service_accounts=tokens
        ),
    }


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_what_is_asked_of_every_policy_builds_no_client(kind: str) -> None:
    source = unbuilt_sources()[kind]
    asked = []
    for body in SPECS[kind]:
        spec = cast(api.PolicySpec, {"type": kind, FIELD[kind]: body})
        ctx = context(spec, {})
        asked.append(
            (
                len(source.secret_refs(spec)),
                source.calls_provider(spec),
                source.finalizer(spec),
                source.idempotent(spec),
                source.protected_secrets(spec),
                source.due_at(ctx),
            )
        )
        if not source.finalizer(spec):
            source.release(ctx)  # nothing held outside the cluster: nothing to give back
    assert len(asked) == len(SPECS[kind])
    assert any(calls for _, calls, *_ in asked)  # provider-calling specs were asked about


def test_copying_a_credentials_file_builds_no_client() -> None:
    keys = "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s\n"
    secrets = {"aws": {"credentials": base64.b64encode(keys.encode()).decode()}}
    spec = cast(api.PolicySpec, {"type": "AWSCredentials", "awsCredentials": AWS_FILE})
    copied = unbuilt_sources()["AWSCredentials"].obtain(context(spec, secrets))
    assert b"AKIAEXAMPLE" in copied.data["credentials"]


def test_a_provider_calling_policy_builds_its_client() -> None:
    built: list[str] = []

    def refuse() -> NoReturn:
        built.append("aws")
        raise RuntimeError("no clients here")

    source = AWSCredentialsSource(
        clients=Lazy(refuse),
        tokens=refusing(oidc.TokenSource),
        service_accounts=refusing(ServiceAccountTokens),
    )
    keys = "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s\n"
    secrets = {"aws": {"credentials": base64.b64encode(keys.encode()).decode()}}
    chained = {
        **AWS_FILE,
        "assumeRole": {"roleArn": "arn:aws:iam::1:role/r", "sessionDuration": "1h"},
    }
    spec = cast(api.PolicySpec, {"type": "AWSCredentials", "awsCredentials": chained})
    with pytest.raises(RuntimeError, match="no clients here"):
        source.obtain(context(spec, secrets))
    assert built == ["aws"]


def _blocked_in(thread: threading.Thread, function: str) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code.co_name == function


def test_two_workers_wanting_the_same_client_build_it_once() -> None:
    building, release = threading.Event(), threading.Event()
    builds: list[object] = []

    def build() -> object:
        builds.append(client := object())
        building.set()
        release.wait(30)
        return client

    held = Lazy(build)
    got: list[object] = []
    first = threading.Thread(target=lambda: got.append(held.get()))
    first.start()
    assert building.wait(30)
    second = threading.Thread(target=lambda: got.append(held.get()))
    second.start()
    # the second waits at the holder's lock (or, were there none, builds a client of its own)
    wait_for(lambda: _blocked_in(second, "get") or len(builds) > 1, what="the second worker")
    assert len(builds) == 1
    release.set()
    first.join(30)
    second.join(30)
    assert got == [builds[0], builds[0]]
    assert held.built


def test_a_failed_build_is_tried_again_by_the_next_get() -> None:
    attempts: list[int] = []

    def build() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("not yet")
        return "client"

    held: Lazy[str] = Lazy(build)
    with pytest.raises(OSError, match="not yet"):
        held.get()
    assert not held.built
    assert held.get() == "client"
    assert held.get() == "client"
    assert len(attempts) == 2


class Client:
    """A provider client (a test's fake, or one the caller built eagerly)."""


def test_a_client_built_eagerly_is_held_as_it_is() -> None:
    client = Client()
    held = Lazy.of(client)
    assert held.built
    assert held.get() is client
    assert Lazy[Client].of(held) is held  # a holder is passed on as it is
    assert not Lazy(Client).built


def test_an_sdk_that_cannot_be_imported_is_a_permanent_failure_naming_the_module() -> None:
    """A broken installation is shown where the user looks (``ProviderRejected``: a condition
    and an Event, no hot loop) and names what is missing. Mutation caught: the ImportError
    propagated (an "unexpected provider error" naming only its type, retried with backoff)."""

    def build() -> str:
        raise ModuleNotFoundError("No module named 'boto3'", name="boto3")

    held: Lazy[str] = Lazy(build, what="the AWS SDK (boto3)")
    with pytest.raises(errors.ProviderRejected) as raised:
        held.get()
    assert "the AWS SDK (boto3) could not be imported (module boto3)" in str(raised.value)
    assert raised.value.code == "ImportError"
    assert not raised.value.transient
    assert not held.built


LATE = """
import json, sys
import controllers.cli, controllers.reconcilers.setup, controllers.runtime.manager
from controllers.runtime import tlsserving
from rotator import oidc

def loaded():
    return [m for m in ("requests", "cryptography") if m in sys.modules]

at_import = loaded()
source = oidc.TokenSource()
tlsserving.SelfSigned()
at_start = loaded()
source._transport.get()  # what the first OIDC exchange does
after_exchange = loaded()
print(json.dumps({"at_import": at_import, "at_start": at_start, "after": after_exchange}))
"""


def test_requests_and_cryptography_are_not_resident_at_start() -> None:
    """The controller's modules, an OIDC token source and the self-signed serving certificate
    leave ``requests`` (~4 MiB) and ``cryptography`` (~8 MiB) out of the process: the first
    waits for the first OIDC exchange (the positive control), the second for a GCP or Azure
    credential (the certificate is made by a child process)."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", LATE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out) == {"at_import": [], "at_start": [], "after": ["requests"]}

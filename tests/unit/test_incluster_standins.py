"""The in-cluster stand-ins' logic that needs no cluster: their settings from the environment,
the Service and Pod manifest agreeing with the ports they listen on, the controller's patch,
the URLs and certificate naming the Service's host, the admin endpoint's answers, registering
policies from their specs (in the policy's namespace), and reading the cluster's issuer."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from controllers.reconcilers import api as rapi
from controllers.reconcilers.route.formats import envoy as envoy_format
from controllers.runtime import client as clients
from controllers.runtime import errors
from rotator_devkit.devenv.providers import Placement, ProviderStandIns
from rotator_devkit.incluster import cluster, samples, settings
from rotator_devkit.incluster.admin import AdminEndpoint
from tests.kind import standins as kind_standins
from tests.support import gatewayload

ISSUER = "https://kubernetes.default.svc.cluster.local"
REPO = Path(__file__).resolve().parents[2]


def call(url: str, body: Any = None, *, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def cluster_keys() -> tuple[rsa.RSAPrivateKey, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return key, {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}


# --- settings ---------------------------------------------------------------------------------


def test_settings_default_to_the_pod_behind_its_service() -> None:
    config = settings.Settings.from_environ({})
    assert config.lifetime == 60
    assert config.bind == "0.0.0.0"
    assert config.public_host == "standins.rotator-standins.svc"
    assert config.samples == Path(settings.SAMPLES)
    placement = config.placement()
    assert placement.ports["sts"] == 5001
    assert placement.tls == {"oidc", "azure", "pod-identity"}
    assert "standins.rotator-standins.svc.cluster.local" in placement.dns_names


def test_settings_read_the_lifetime_offset_and_samples_from_the_environment() -> None:
    config = settings.Settings.from_environ(
        {
            "ROTATOR_STANDINS_LIFETIME": "30",
            "ROTATOR_STANDINS_PORT_OFFSET": "20000",
            "ROTATOR_STANDINS_SAMPLES": "",
            "ROTATOR_STANDINS_PUBLIC_HOST": "127.0.0.1",
        }
    )
    assert (config.lifetime, config.port("admin"), config.samples) == (30, 28080, None)
    assert config.placement().dns_names == ()


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_settings_refuse_a_lifetime_that_is_not_a_positive_whole_number(value: str) -> None:
    with pytest.raises(ValueError, match="ROTATOR_STANDINS_LIFETIME"):
        settings.Settings.from_environ({"ROTATOR_STANDINS_LIFETIME": value})


def test_short_names_are_those_a_services_dns_answers() -> None:
    assert settings.short_names("a.b.svc") == ("a.b.svc.cluster.local", "a.b", "a")
    assert settings.short_names("example.com") == ()


# --- the manifests and the controller's patch -------------------------------------------------


def test_the_service_and_the_pod_name_every_port_the_stand_ins_listen_on() -> None:
    docs = {d["kind"]: d for d in kind_standins.manifests("img:1", lifetime=45)}
    service = {p["name"]: p["port"] for p in docs["Service"]["spec"]["ports"]}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    pod = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service == pod == settings.PORTS
    assert docs["Service"]["metadata"]["name"] == settings.SERVICE
    assert docs["Namespace"]["metadata"]["name"] == settings.NAMESPACE
    assert (container["image"], container["imagePullPolicy"]) == ("img:1", "Never")
    assert {"name": "ROTATOR_STANDINS_LIFETIME", "value": "45"} in container["env"]


def test_the_stand_ins_pod_passes_restricted_pod_security() -> None:
    docs = {d["kind"]: d for d in kind_standins.manifests("img:1", lifetime=60)}
    assert docs["Namespace"]["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "restricted"
    }
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = pod["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_controller_patch_sets_env_and_mounts_the_ca_and_token_and_nothing_else() -> None:
    env = {"AWS_ENDPOINT_URL_STS": "http://standins.rotator-standins.svc:5001"}
    patch = kind_standins.controller_patch(env, identity_namespaces=None)
    pod = patch["spec"]["template"]["spec"]
    assert set(patch) == {"spec"}
    assert set(pod) == {"containers", "volumes"}
    (container,) = pod["containers"]
    assert set(container) == {"name", "env", "volumeMounts"}
    assert container["name"] == "manager"
    assert container["env"] == [{"name": k, "value": v} for k, v in env.items()]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[settings.MOUNT]["readOnly"] is True
    assert mounts[kind_standins.CERTIFI_BUNDLE]["subPath"] == settings.CA_KEY
    assert pod["volumes"] == [
        {"name": "rotator-standins", "secret": {"secretName": kind_standins.CONTROLLER_SECRET}}
    ]
    listed = kind_standins.controller_patch(env, identity_namespaces="default")
    names = [v["name"] for v in listed["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "ROTATOR_CONTROLLER_IDENTITY_NAMESPACES" in names


# --- the stand-ins placed, and the admin endpoint ---------------------------------------------


@pytest.fixture
def placed(tmp_path: Path) -> Iterator[tuple[ProviderStandIns, AdminEndpoint]]:
    """The stand-ins on loopback, but placed as in a Pod: URLs naming ``localhost``, TLS where
    the Pod has it, the cluster's issuer trusted, config/samples registered."""
    placement = Placement(
        bind="127.0.0.1",
        public_host="localhost",
        tls=settings.TLS,
        dns_names=settings.short_names("standins.rotator-standins.svc"),
    )
    standins = ProviderStandIns(tmp_path, lifetime=60, placement=placement).start()
    admin: AdminEndpoint | None = None
    try:
        standins.trust_cluster(ISSUER, cluster_keys()[1])
        docs = samples.load(REPO / "config" / "samples")
        standins.register_documents(docs)
        admin = AdminEndpoint(standins, samples=docs)
        admin.place(("127.0.0.1", 0), "localhost").start()
        yield standins, admin
    finally:
        if admin is not None:
            admin.stop()
        standins.stop()


def test_placed_stand_ins_name_their_public_host_and_serve_tls_that_their_ca_verifies(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, _ = placed
    assert standins.oidc.issuer.startswith("https://localhost:")
    assert standins.sts is not None
    assert standins.sts.url.startswith("http://localhost:")
    assert standins.ca_file is not None
    context = ssl.create_default_context(cafile=str(standins.ca_file))
    status, discovery = call(
        standins.oidc.issuer + "/.well-known/openid-configuration", context=context
    )
    assert status == 200
    assert discovery["issuer"] == standins.oidc.issuer


def test_the_admin_endpoint_tells_the_controller_env_with_the_mounted_paths(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    status, info = call(admin.url + "/info")
    assert status == 200
    env = info["env"]
    assert env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] == f"{settings.MOUNT}/pod-identity-token"
    assert env["REQUESTS_CA_BUNDLE"] == f"{settings.MOUNT}/ca.crt"
    assert env["AWS_CONTAINER_CREDENTIALS_FULL_URI"].startswith("https://localhost:")
    assert env["ROTATOR_AZURE_AUTHORITY_HOST"].startswith("https://localhost:")
    assert info["issuer"] == ISSUER
    assert info["podIdentityToken"] == standins.pod_identity_token
    assert info["caPEM"].startswith("-----BEGIN CERTIFICATE-----")
    status, listed = call(admin.url + "/samples")
    assert status == 200
    oidc_policies = [
        d
        for d in listed["items"]
        if d["kind"] == "BackendSecurityPolicy"
        and "oidcExchangeToken" in (d["spec"].get("awsCredentials") or {})
    ]
    assert oidc_policies
    for policy in oidc_policies:
        issuer = policy["spec"]["awsCredentials"]["oidcExchangeToken"]["oidc"]["issuer"]
        assert issuer == standins.oidc.issuer


def test_registering_service_account_policies_lets_their_tokens_assume_the_roles(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    policies = [
        {
            "metadata": {"name": f"p{i}", "namespace": "load"},
            "spec": {
                "awsCredentials": {
                    "region": "us-east-1",
                    "serviceAccountToken": {
                        "serviceAccountName": f"sa{i}",
                        "awsRoleArn": f"arn:aws:iam::123456789012:role/load-{i}",
                    },
                }
            },
        }
        for i in range(100)
    ]
    status, answer = call(admin.url + "/register", {"policies": policies, "secrets": []})
    assert status == 200
    assert len(answer["policies"]) == 100
    assert standins.sts is not None
    assert {f"arn:aws:iam::123456789012:role/load-{i}" for i in range(100)} <= standins.sts.roles


def test_an_azure_service_account_policy_is_federated_in_its_own_namespace(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    policy = {
        "metadata": {"name": "az", "namespace": "tenant-a"},
        "spec": {
            "azureCredentials": {
                "clientID": "client-ns",
                "tenantID": "tenant",
                "serviceAccountToken": {"serviceAccountName": "caller"},
            }
        },
    }
    status, _ = call(admin.url + "/register", {"policies": [policy], "secrets": []})
    assert status == 200
    assert standins.azure is not None
    app = standins.azure.apps["client-ns"]
    assert (ISSUER, "system:serviceaccount:tenant-a:caller") in app.federated


def test_the_admin_endpoint_refuses_a_policy_whose_secret_is_not_given(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    _, admin = placed
    policy = {
        "metadata": {"name": "az"},
        "spec": {
            "azureCredentials": {
                "clientID": "c",
                "tenantID": "t",
                "clientSecretRef": {"name": "absent"},
            }
        },
    }
    status, answer = call(admin.url + "/register", {"policies": [policy], "secrets": []})
    assert status == 400
    assert "KeyError" in answer["error"]
    assert call(admin.url + "/nowhere")[0] == 404


def test_calls_are_counted_by_stand_in_and_action_and_issued_values_listed(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    assert standins.gcp is not None
    call(standins.gcp.sts_url, {"grant_type": "nonsense"})
    status, counts = call(admin.url + "/calls")
    assert status == 200
    assert counts["gcp.received"] == 1
    assert counts["gcp.exchange_refused"] == 1
    _, issued = call(admin.url + "/issued")
    assert standins.pod_identity_token in issued["values"]


def test_a_stand_in_can_be_made_to_fail_through_the_admin_endpoint(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    status, _ = call(admin.url + "/mode", {"standIn": "gcp", "mode": "fail"})
    assert status == 200
    assert standins.gcp.mode == "fail"
    assert call(admin.url + "/mode", {"standIn": "gcp", "mode": "sideways"})[0] == 400


def test_a_hang_set_through_the_admin_endpoint_answers_by_itself_after_its_seconds(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    answer = call(admin.url + "/mode", {"standIn": "gcp", "mode": "hang", "hangSeconds": 0.5})
    assert answer == (200, {"standIn": "gcp", "mode": "hang", "hangSeconds": 0.5})
    assert standins.gcp.hang_seconds == 0.5
    for bad in (0, -1, 61, "5", True, None):
        request = {"standIn": "gcp", "mode": "hang", "hangSeconds": bad}
        assert call(admin.url + "/mode", request)[0] == 400, bad
    sideways = {"standIn": "gcp", "mode": "sideways", "hangSeconds": 5}
    assert call(admin.url + "/mode", sideways)[0] == 400
    assert standins.gcp.hang_seconds == 0.5  # a refused ask changes nothing
    assert standins.gcp.mode == "hang"
    call(admin.url + "/mode", {"standIn": "gcp", "mode": "ok"})
    assert standins.gcp.hang_seconds == 60  # the default again: no hold is left shortened


def chat(url: str, key: str) -> int:
    body = json.dumps({"model": "gpt", "messages": []}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_model_upstreams_take_keys_and_tell_what_they_received_by_label_only(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    old, new = "sk-upstream-old-0001", "sk-upstream-new-0002"
    assert call(admin.url + "/accept", {"keys": [old]}) == (200, {"accepted": 1})
    openai = standins.upstreams()["openai"].url
    assert chat(openai, old) == 200
    assert chat(openai, new) == 401  # never given: unknown
    call(admin.url + "/accept", {"keys": [new]})
    assert chat(openai, old) == 401  # retired: its overlap is over
    assert chat(openai, new) == 200
    status, received = call(admin.url + "/upstreams")
    assert status == 200
    assert set(received) == {"openai", "bedrock", "azure-openai", "vertex-ai"}
    verdicts = [(row[2], row[3]) for row in received["openai"]]
    label = standins.openai.label
    assert verdicts == [
        ("current", label(old)),
        ("unknown", label(new)),
        ("expired", label(old)),
        ("current", label(new)),
    ]
    assert old not in json.dumps(received)
    assert new not in json.dumps(received)
    assert call(admin.url + "/accept", {"keys": ["", 3]})[0] == 400


def test_the_lifetime_of_what_the_issuers_mint_is_set_through_the_admin_endpoint(
    placed: tuple[ProviderStandIns, AdminEndpoint],
) -> None:
    standins, admin = placed
    assert call(admin.url + "/lifetime", {"seconds": 150}) == (200, {"seconds": 150})
    assert standins.sts is not None
    assert standins.azure is not None
    assert (standins.lifetime, standins.sts.lifetime, standins.azure.lifetime) == (150, 150, 150)
    assert standins.gcp.lifetime == standins.imds.lifetime == standins.metadata.lifetime == 150
    for bad in (0, -1, True, "150", 1.5):
        assert call(admin.url + "/lifetime", {"seconds": bad})[0] == 400, bad
    assert standins.sts.lifetime == 150


# --- the cluster's issuer ---------------------------------------------------------------------


class FakeAPI:
    def __init__(self, answers: dict[str, Any], failures: int = 0) -> None:
        self.answers = answers
        self.failures = failures
        self.asked: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> Any:
        self.asked.append((method, path))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("not yet")
        return self.answers[path]


def test_the_issuer_is_whatever_the_clusters_discovery_names_with_its_jwks() -> None:
    key, jwks = cluster_keys()
    api = FakeAPI({cluster.DISCOVERY: {"issuer": "https://kind.example"}, cluster.JWKS: jwks})
    issuer, found = cluster.service_account_issuer(api)  # type: ignore[arg-type]
    assert (issuer, found) == ("https://kind.example", jwks)
    assert api.asked == [("GET", "/.well-known/openid-configuration"), ("GET", "/openid/v1/jwks")]
    token = jwt.encode({"iss": issuer}, key, algorithm="RS256", headers={"kid": "k1"})
    assert jwt.decode(token, jwt.PyJWK(found["keys"][0]).key, algorithms=["RS256"])["iss"] == issuer


def test_reading_the_issuer_is_retried_until_its_deadline() -> None:
    now = [0.0]
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    api = FakeAPI({"x": 1}, failures=2)
    assert (
        cluster.with_retries(
            lambda: api.request("GET", "x"), timeout=5, monotonic=lambda: now[0], pause=pause
        )
        == 1
    )
    assert pauses == [1.0, 1.0]
    api = FakeAPI({"x": 1}, failures=100)
    with pytest.raises(ConnectionError):
        cluster.with_retries(
            lambda: api.request("GET", "x"), timeout=3, monotonic=lambda: now[0], pause=pause
        )


def test_the_litellm_deployment_opts_in_mounts_its_route_config_and_keeps_a_proxy_ready() -> None:
    """tests/kind/manifests/litellm.yaml, which docs/operations.md points users at."""
    manifest = REPO / "tests" / "kind" / "manifests" / "litellm.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest.read_text())}
    deployment = docs["Deployment"]
    template = deployment["spec"]["template"]
    assert gatewayload.ANNOTATION in template["metadata"]["annotations"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = template["spec"]
    secrets = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert secrets == [rapi.route_config_secret_name(gatewayload.ROUTE)]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "readinessProbe" in container
    assert "preStop" in container["lifecycle"]


def test_the_envoy_deployment_runs_in_its_mounted_route_config_with_no_rollout_opt_in() -> None:
    """tests/kind/manifests/envoy.yaml, which docs/api.md's Envoy format points users at: Envoy
    runs where the whole config Secret of config/samples/envoy.yaml is mounted (every path in its
    files is relative, and a ``subPath`` mount is never updated), listens on the sample's port,
    and nothing asks rotator to roll it out: it reloads the credential files itself."""
    manifest = REPO / "tests" / "kind" / "manifests" / "envoy.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest.read_text())}
    route = yaml.safe_load((REPO / "config" / "samples" / "envoy.yaml").read_text())
    assert route["spec"]["output"]["format"] == envoy_format.FORMAT
    assert "rolloutRestartTargets" not in route["spec"]
    port = envoy_format.listener(route).port
    deployment = docs["Deployment"]
    template = deployment["spec"]["template"]
    annotations = template["metadata"].get("annotations") or {}
    assert not [a for a in annotations if a.startswith(rapi.ROLLOUT_ANNOTATION_PREFIX)]
    pod = template["spec"]
    (volume,) = pod["volumes"]
    assert volume["secret"] == {
        "secretName": rapi.route_config_secret_name(route["metadata"]["name"])
    }
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    assert mount == {"name": volume["name"], "mountPath": container["workingDir"], "readOnly": True}
    command = container["command"]
    assert command[:3] == ["envoy", "-c", envoy_format.BOOTSTRAP]
    assert "--disable-hot-restart" in command  # no shared memory on a read-only root
    assert container["imagePullPolicy"] == "Never"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["tcpSocket"]["port"] == "http"
    assert container["ports"] == [{"name": "http", "containerPort": port}]
    service = docs["Service"]
    assert service["spec"]["selector"] == template["metadata"]["labels"]
    assert service["spec"]["ports"] == [{"name": "http", "port": port, "targetPort": "http"}]


# --- the admin channel ------------------------------------------------------------------------


class _ProxyPath:
    """A client whose service-proxy path fails as told, then answers: each failure an error
    as the client raises it (``controllers.runtime.errors``)."""

    def __init__(self, *failures: errors.ApiError) -> None:
        self.failures = list(failures)
        self.asked: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, *, body: Any = None) -> Any:
        self.asked.append((method, path, body))
        if self.failures:
            raise self.failures.pop(0)
        return {"answered": len(self.asked)}


def _admin(path: _ProxyPath, pauses: list[float]) -> Any:
    return kind_standins.admin(
        cast(clients.Client, path), "POST", "register", {"policies": []}, pause=pauses.append
    )


def test_the_admin_channel_asks_again_after_a_broken_answer_or_a_proxy_5xx() -> None:
    broken = errors.ConnectionFailed("reading the 200 response failed: IncompleteRead")
    unavailable = errors.from_status(503, reason="ServiceUnavailable", message="no endpoints")
    path, pauses = _ProxyPath(broken, unavailable), list[float]()
    assert _admin(path, pauses) == {"answered": 3}
    assert [asked[1].rsplit("/", 2)[-2:] for asked in path.asked] == [["proxy", "register"]] * 3
    assert {asked[2]["policies"] == [] for asked in path.asked} == {True}
    assert pauses == [0.5, 1.0]


def test_the_admin_channel_gives_up_after_its_attempts_with_the_last_fault() -> None:
    faults = [errors.ConnectionFailed(f"broken {n}") for n in range(kind_standins.ADMIN_ATTEMPTS)]
    path, pauses = _ProxyPath(*faults), list[float]()
    with pytest.raises(errors.ConnectionFailed, match=f"broken {kind_standins.ADMIN_ATTEMPTS - 1}"):
        _admin(path, pauses)
    assert len(path.asked) == kind_standins.ADMIN_ATTEMPTS
    assert pauses == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    "answer",
    [
        errors.from_status(400, reason="BadRequest", message="KeyError: 'standIn'"),
        errors.from_status(404, reason="NotFound", message="no POST /nothing"),
        clients.BodyTooLarge("the response is over its bound of 4194304 bytes"),
    ],
)
def test_the_admin_channel_never_asks_again_after_a_refusal_or_a_body_too_large(
    answer: errors.ApiError,
) -> None:
    path, pauses = _ProxyPath(answer), list[float]()
    with pytest.raises(type(answer)):
        _admin(path, pauses)
    assert len(path.asked) == 1
    assert pauses == []

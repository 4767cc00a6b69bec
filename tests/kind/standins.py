"""The provider stand-ins in the kind cluster: moto and the token services as a Deployment and
Service from the dev-kit image (``python -m rotator_devkit.incluster``, never the product's
image), and what the suite asks of them.

:func:`install_standins` applies ``manifests/standins.yaml`` (restricted pod security, the image
never pulled) and waits until the Pod is Ready; the :class:`StandIns` it returns tells how to
point the controller at them (:meth:`StandIns.controller_patch`) and reads their admin endpoint
through the API server's service proxy — all traffic goes to the cluster's API server on
127.0.0.1, no port is opened on the host. The stand-ins verify ServiceAccount tokens against the
kind API server's own OIDC discovery and JWKS.

The pytest fixture :func:`standins` (session scope) installs them in the cluster
``ROTATOR_KIND_KUBECONFIG`` names, with the image ``ROTATOR_KIND_DEVKIT_IMAGE``.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator_devkit.incluster import settings
from tests.support.polling import wait_for

MANIFESTS = Path(__file__).parent / "manifests" / "standins.yaml"
NAMESPACE = settings.NAMESPACE
SERVICE = settings.SERVICE
DEPLOYMENT = "standins"
CONTAINER = "standins"
FIELD_MANAGER = "rotator-kind-standins"

CONTROLLER_NAMESPACE = "rotator-system"
CONTROLLER_DEPLOYMENT = "rotator-controller-manager"
CONTROLLER_CONTAINER = "manager"
CONTROLLER_SECRET = "rotator-standins"
"""In the controller's namespace: the stand-ins' CA and the pod identity token."""
CERTIFI_BUNDLE = "/opt/rotator/lib/python3.11/site-packages/certifi/cacert.pem"
"""The product image's certifi bundle, which botocore's container credentials fetcher trusts
(it reads no CA setting): the stand-ins' CA is mounted over it, so that the controller's own
AWS identity can come from the (https) pod identity stand-in in another Pod."""

# Names of :meth:`StandIns.calls`: ``<stand-in>.<what it counts>``.
STS_ASSUME_ROLE_WITH_WEB_IDENTITY = "sts.AssumeRoleWithWebIdentity"
STS_ASSUME_ROLE = "sts.AssumeRole"
STS_GET_CALLER_IDENTITY = "sts.GetCallerIdentity"
IAM_CREATE_ACCESS_KEY = "iam.CreateAccessKey"
IAM_DELETE_ACCESS_KEY = "iam.DeleteAccessKey"
GCP_EXCHANGE = "gcp.exchange"
GCP_IMPERSONATE = "gcp.impersonate"
GCP_OAUTH = "gcp.oauth"
AZURE_TOKEN = "azure.token"
OIDC_TOKEN = "oidc.token"
POD_IDENTITY_SERVED = "pod-identity.served"
IMDS_TOKEN = "imds.imds_token"
GCE_METADATA_TOKEN = "gce-metadata.token"

DEPLOYMENTS = objects.Resource("apps", "v1", "deployments", "Deployment")
SERVICES = objects.Resource("", "v1", "services", "Service")
KINDS = {
    "Namespace": objects.NAMESPACES,
    "ServiceAccount": objects.SERVICEACCOUNTS,
    "Secret": objects.SECRETS,
    "Deployment": DEPLOYMENTS,
    "Service": SERVICES,
}


def find_kubectl() -> str:
    """``ROTATOR_KIND_KUBECTL``, or the one hack/testenv.sh built, or kubectl on PATH."""
    if explicit := os.environ.get("ROTATOR_KIND_KUBECTL"):
        return explicit
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rotator"
    folders = [os.environ.get("KUBEBUILDER_ASSETS", "")]
    folders += [str(p.parent) for p in sorted((cache / "controlplane").glob("*/kubectl"))]
    for folder in folders:
        if folder and os.access(Path(folder) / "kubectl", os.X_OK):
            return str(Path(folder) / "kubectl")
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: run hack/testenv.sh or install kubectl")
    return found


def manifests(image: str, *, lifetime: int) -> list[dict[str, Any]]:
    """``manifests/standins.yaml`` with the image and the credential lifetime filled in."""
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["image"] = image
            for var in container["env"]:
                if var["name"] == settings.ENV_PREFIX + "LIFETIME":
                    var["value"] = str(lifetime)
    return docs


VOLUME = "rotator-standins"


def _variables(env: dict[str, str], identity_namespaces: str | None) -> list[dict[str, str]]:
    variables = dict(env)
    if identity_namespaces is not None:
        variables["ROTATOR_CONTROLLER_IDENTITY_NAMESPACES"] = identity_namespaces
    return [{"name": k, "value": v} for k, v in sorted(variables.items())]


VOLUME_MOUNTS: list[dict[str, Any]] = [
    {"name": VOLUME, "mountPath": settings.MOUNT, "readOnly": True},
    {"name": VOLUME, "mountPath": CERTIFI_BUNDLE, "subPath": settings.CA_KEY, "readOnly": True},
]
"""The Secret :data:`CONTROLLER_SECRET` at :data:`settings.MOUNT` (where the stand-ins'
environment names its files), and its CA over :data:`CERTIFI_BUNDLE`."""
VOLUMES: list[dict[str, Any]] = [{"name": VOLUME, "secret": {"secretName": CONTROLLER_SECRET}}]


def controller_patch(env: dict[str, str], *, identity_namespaces: str | None) -> dict[str, Any]:
    """A strategic-merge patch of the controller's Deployment: ``env``, and the Secret
    :data:`CONTROLLER_SECRET` mounted at :data:`settings.MOUNT` (where ``env`` names its files)
    and its CA over :data:`CERTIFI_BUNDLE`; ``identity_namespaces``, when given, is where
    policies may use the controller's own identity (the samples' namespace)."""
    return {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": CONTROLLER_CONTAINER,
                            "env": _variables(env, identity_namespaces),
                            "volumeMounts": VOLUME_MOUNTS,
                        }
                    ],
                    "volumes": VOLUMES,
                }
            }
        }
    }


def helm_values(env: dict[str, str], *, identity_namespaces: str | None) -> dict[str, Any]:
    """What :func:`controller_patch` sets, as charts/rotator's values (``extraEnv``,
    ``extraVolumes``, ``extraVolumeMounts``)."""
    return {
        "extraEnv": _variables(env, identity_namespaces),
        "extraVolumes": copy.deepcopy(VOLUMES),
        "extraVolumeMounts": copy.deepcopy(VOLUME_MOUNTS),
    }


@dataclass
class StandIns:
    """The stand-ins running in the cluster, as the suite sees them."""

    kubeconfig: Path
    api: clients.Client
    env: dict[str, str]
    """The controller's environment (:meth:`controller_patch` sets it)."""
    ca_pem: str
    """The CA of the stand-ins' TLS certificate (Azure AD, the OIDC issuer, pod identity)."""
    pod_identity_token: str
    issuer: str
    """The cluster's service-account issuer, as the API server's discovery names it."""
    lifetime: int
    namespace: str = NAMESPACE
    kubectl: str = field(default_factory=find_kubectl)

    def controller_patch(self, identity_namespaces: str | None = None) -> dict[str, Any]:
        """A strategic-merge patch for Deployment rotator-system/rotator-controller-manager
        (container ``manager``): the stand-ins' environment, their CA and the pod identity token
        mounted from the Secret :data:`CONTROLLER_SECRET` in rotator-system (made by
        :func:`install_standins`) — nothing else, unless ``identity_namespaces`` is given: then
        ``ROTATOR_CONTROLLER_IDENTITY_NAMESPACES`` too (where policies may use the controller's
        own identity)."""
        return controller_patch(self.env, identity_namespaces=identity_namespaces)

    def helm_values(self, identity_namespaces: str | None = None) -> dict[str, Any]:
        """The same as charts/rotator's values (:func:`helm_values`): the Secret
        :data:`CONTROLLER_SECRET` must be in the release's namespace
        (:meth:`ensure_controller_secret`)."""
        return helm_values(self.env, identity_namespaces=identity_namespaces)

    def calls(self) -> dict[str, int]:
        """Provider calls so far, by ``<stand-in>.<action>`` (see the constants above)."""
        return {str(k): int(v) for k, v in self.admin("GET", "calls").items()}

    def register(self, policies: list[dict[str, Any]], secrets: list[dict[str, Any]]) -> None:
        """Makes what ``policies`` (BackendSecurityPolicy objects) name known to the stand-ins,
        reading client secrets from ``secrets`` (Secret objects); a policy without a namespace
        is in ``default``. Like ``rotator dev``, it changes the objects in place where they must
        name what exists there (an OIDC issuer's URL, a GCP key): apply them after."""
        answer = self.admin("POST", "register", {"policies": policies, "secrets": secrets})
        for mine, theirs in zip(policies, answer["policies"], strict=True):
            mine.clear()
            mine.update(theirs)
        for mine, theirs in zip(secrets, answer["secrets"], strict=True):
            mine.clear()
            mine.update(theirs)

    def issued(self) -> frozenset[str]:
        """Every secret value the stand-ins handed out or were given (for leak scans)."""
        return frozenset(self.admin("GET", "issued")["values"])

    def samples(self) -> list[dict[str, Any]]:
        """config/samples as registered at the stand-ins' start (OIDC issuers pointed at them,
        keys their GCP trusts): apply these, not the files, for every sample chain to work."""
        return list(self.admin("GET", "samples")["items"])

    def set_mode(
        self, stand_in: str, mode: str, *, hang_seconds: float | None = None
    ) -> dict[str, Any]:
        """``ok``, ``fail`` (503) or ``hang`` for one stand-in (``sts``, ``azure``…); a hang
        answers each call after ``hang_seconds`` by itself (60 without). Returns the stand-in's
        answer (its mode as set)."""
        request: dict[str, Any] = {"standIn": stand_in, "mode": mode}
        if hang_seconds is not None:
            request["hangSeconds"] = hang_seconds
        return dict(self.admin("POST", "mode", request))

    def url(self, stand_in: str) -> str:
        """A stand-in's base URL inside the cluster (Service DNS)."""
        scheme = "https" if stand_in in settings.TLS else "http"
        return f"{scheme}://{settings.PUBLIC_HOST}:{settings.PORTS[stand_in]}"

    def exec_python(self, code: str, *, timeout: float = 60) -> str:
        """Runs ``python -c code`` in the stand-ins' Pod (it reaches every Service of the
        cluster) and returns its stdout; AssertionError with stderr's end when it fails."""
        done = subprocess.run(
            [
                self.kubectl,
                "--kubeconfig",
                str(self.kubeconfig),
                "exec",
                "--namespace",
                self.namespace,
                f"deployment/{DEPLOYMENT}",
                "--container",
                CONTAINER,
                "--",
                "python",
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"python in the stand-ins' Pod exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done.stdout

    def ensure_controller_secret(self) -> None:
        """Writes the Secret :meth:`controller_patch` mounts (the CA and the pod identity
        token) in rotator-system, making that namespace (restricted, as config/default does) if
        it is not there: again after anything deleted the namespace."""
        _apply(self.api, _controller_namespace())
        _apply(
            self.api,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": CONTROLLER_SECRET, "namespace": CONTROLLER_NAMESPACE},
                "type": "Opaque",
                "stringData": {
                    settings.CA_KEY: self.ca_pem,
                    settings.TOKEN_KEY: self.pod_identity_token,
                },
            },
        )

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The admin endpoint, through the API server's service proxy."""
        return admin(self.api, method, path, body)


ADMIN_ATTEMPTS = 4
"""How many times :func:`admin` asks before a transport fault fails the test."""
ADMIN_TRANSPORT_FAULTS: tuple[type[errors.ApiError], ...] = (
    errors.ConnectionFailed,
    errors.ServerError,
)
"""What :func:`admin` asks again: the connection broken, or the proxy's 5xx (no endpoint
yet, the Pod's connection refused) — never an answer of the endpoint itself (a 400, a 404)."""


def admin(
    api: clients.Client,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    pause: Callable[[float], None] = time.sleep,
) -> Any:
    """Asks the admin endpoint through the API server's service proxy, again after a transport
    fault (:data:`ADMIN_TRANSPORT_FAULTS`), up to :data:`ADMIN_ATTEMPTS` times.

    Why again: that path is the suite's control channel, not what a test asserts, and it has
    two hops that can break under a loaded 2-core CI (one run read 36,717 of the 37,129 bytes
    of a ``POST register``'s 200, and three tests of the upgrade failed in their setup). Asking
    again is safe because every admin call is a read or sets a value: a register asked twice
    leaves the stand-ins as once would (but for a GCP key minted twice, whose first answer
    never reached the test, so nothing uses it). ``pause`` is the backoff (0.5 s, then 1, 2).
    """
    proxy = f"/api/v1/namespaces/{NAMESPACE}/services/http:{SERVICE}:{settings.ADMIN}/proxy/"
    for attempt in range(1, ADMIN_ATTEMPTS + 1):
        try:
            return api.request(method, proxy + path, body=body)
        except clients.BodyTooLarge:
            raise  # a ConnectionFailed too, but the same answer would be too large again
        except ADMIN_TRANSPORT_FAULTS:
            if attempt == ADMIN_ATTEMPTS:
                raise
            pause(0.5 * 2 ** (attempt - 1))
    raise AssertionError("unreachable: the last attempt returns or raises")


def install_standins(kubeconfig: Path, image: str, *, lifetime: int = 60) -> StandIns:
    """Applies the stand-ins (``image`` already in the node), waits until their Pod is Ready
    and their admin endpoint answers, and writes the Secret the controller mounts
    (:meth:`StandIns.controller_patch`). Idempotent: on a kept cluster with the same image and
    lifetime, the running Pod (and what it issued) stays."""
    api = clients.Client(restconfig.load(str(kubeconfig)))
    for doc in manifests(image, lifetime=lifetime):
        _apply(api, doc)
    wait_for(lambda: _rolled_out(api), timeout=180, interval=0.5, what="the stand-ins' Pod Ready")
    info = wait_for(
        lambda: admin(api, "GET", "info"), timeout=60, interval=0.5, what="the admin endpoint"
    )
    made = StandIns(
        kubeconfig=kubeconfig,
        api=api,
        env=dict(info["env"]),
        ca_pem=info["caPEM"],
        pod_identity_token=info["podIdentityToken"],
        issuer=info["issuer"],
        lifetime=int(info["lifetime"]),
    )
    made.ensure_controller_secret()
    return made


def _controller_namespace() -> dict[str, Any]:
    """rotator-system as config/default makes it (restricted), for the Secret to live in
    before the controller is installed."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": CONTROLLER_NAMESPACE,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        },
    }


def _apply(api: clients.Client, doc: dict[str, Any]) -> None:
    resource = KINDS[doc["kind"]]
    body = copy.deepcopy(doc)
    path = resource.path(namespace=objects.namespace(body), name=objects.name(body))
    query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
    api.request("PATCH", path, query=query, body=body, content_type=str(clients.PatchType.APPLY))


def _rolled_out(api: clients.Client) -> bool:
    """The Deployment's current template runs in one Ready Pod, and no older Pod is left."""
    try:
        deployment = api.get(DEPLOYMENTS, DEPLOYMENT, namespace=NAMESPACE)
    except errors.NotFound:
        return False
    status = deployment.get("status") or {}
    wanted = deployment["spec"].get("replicas", 1)
    return bool(
        status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
        and status.get("updatedReplicas") == wanted
        and status.get("readyReplicas") == wanted
        and status.get("replicas") == wanted
    )


@pytest.fixture(scope="session")
def standins() -> StandIns:
    """The stand-ins in the suite's kind cluster (``ROTATOR_KIND_KUBECONFIG``), from the image
    ``ROTATOR_KIND_DEVKIT_IMAGE``; skips without a cluster."""
    kubeconfig = os.environ.get("ROTATOR_KIND_KUBECONFIG")
    image = os.environ.get("ROTATOR_KIND_DEVKIT_IMAGE")
    if not kubeconfig or not image:
        pytest.skip("no kind cluster: ROTATOR_KIND_KUBECONFIG and ROTATOR_KIND_DEVKIT_IMAGE unset")
    return install_standins(Path(kubeconfig), image)

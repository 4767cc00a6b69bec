"""The local control plane is real: versioned binaries, RBAC, TokenRequest, garbage collection,
namespace deletion, and a stop that leaves nothing behind."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from controllers.runtime import errors, objects
from rotator_devkit.controlplane import cluster
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.support import kubeversion
from tests.support.kube import token_client
from tests.support.polling import wait_for

pytestmark = [pytest.mark.local_control_plane, pytest.mark.oldest_kubernetes]

KUBE_VERSION = kubeversion.pinned()


def test_binaries_and_server_report_the_pinned_version(control_plane, api) -> None:
    out = subprocess.run(
        [str(control_plane.assets / "kube-apiserver"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == f"Kubernetes {KUBE_VERSION}"
    assert api.request("GET", "/version")["gitVersion"] == KUBE_VERSION


def test_rbac_is_enforced_for_service_accounts(control_plane, api, namespace) -> None:
    api.create(objects.SERVICEACCOUNTS, {"metadata": {"name": "reader"}}, namespace=namespace)
    token = api.create(
        objects.SERVICEACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        namespace=namespace,
        name="reader",
        subresource="token",
    )["status"]["token"]
    reader = token_client(control_plane, token)
    with pytest.raises(errors.Forbidden):
        reader.list(objects.CONFIGMAPS, namespace=namespace)
    rbac = "rbac.authorization.k8s.io"
    api.create(
        objects.Resource(rbac, "v1", "roles", "Role"),
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
        namespace=namespace,
    )
    api.create(
        objects.Resource(rbac, "v1", "rolebindings", "RoleBinding"),
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "read-configmaps"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
        namespace=namespace,
    )
    wait_for(lambda: reader.list(objects.CONFIGMAPS, namespace=namespace), what="RBAC grant")
    with pytest.raises(errors.Forbidden):
        reader.list(objects.SECRETS, namespace=namespace)


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def test_token_request_signs_tokens_verifiable_by_the_issuer_jwks(api, namespace) -> None:
    wait_for(
        lambda: api.get(objects.SERVICEACCOUNTS, "default", namespace=namespace),
        what="the serviceaccount controller creates 'default'",
    )
    token = api.create(
        objects.SERVICEACCOUNTS,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": ["sts.amazonaws.com"], "expirationSeconds": 600},
        },
        namespace=namespace,
        name="default",
        subresource="token",
    )["status"]["token"]
    header_b64, payload_b64, signature_b64 = token.split(".")
    header = json.loads(_b64url(header_b64))
    claims = json.loads(_b64url(payload_b64))
    assert claims["aud"] == ["sts.amazonaws.com"]
    assert claims["iss"] == cluster.SERVICE_ACCOUNT_ISSUER
    assert claims["sub"] == f"system:serviceaccount:{namespace}:default"
    discovery = api.request("GET", "/.well-known/openid-configuration")
    assert discovery["issuer"] == cluster.SERVICE_ACCOUNT_ISSUER
    jwks = api.request("GET", "/openid/v1/jwks", accept="application/jwk-set+json")
    key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
    public = rsa.RSAPublicNumbers(
        int.from_bytes(_b64url(key["e"]), "big"), int.from_bytes(_b64url(key["n"]), "big")
    ).public_key()
    public.verify(  # raises InvalidSignature if the token was not signed by the issuer's key
        _b64url(signature_b64),
        f"{header_b64}.{payload_b64}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )


def test_garbage_collector_deletes_dependents(api, namespace) -> None:
    owner = api.create(objects.CONFIGMAPS, {"metadata": {"name": "owner"}}, namespace=namespace)
    api.create(
        objects.CONFIGMAPS,
        {
            "metadata": {
                "name": "dependent",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            }
        },
        namespace=namespace,
    )
    api.delete(objects.CONFIGMAPS, "owner", namespace=namespace)

    def gone() -> bool:
        try:
            api.get(objects.CONFIGMAPS, "dependent", namespace=namespace)
        except errors.NotFound:
            return True
        return False

    wait_for(gone, timeout=60, what="garbage collection of the dependent")


def test_namespace_deletion_completes(api) -> None:
    api.create(objects.NAMESPACES, {"metadata": {"name": "doomed"}})
    api.create(objects.CONFIGMAPS, {"metadata": {"name": "c"}}, namespace="doomed")
    api.delete(objects.NAMESPACES, "doomed")

    def gone() -> bool:
        try:
            api.get(objects.NAMESPACES, "doomed")
        except errors.NotFound:
            return True
        return False

    wait_for(gone, timeout=60, what="the namespace controller to finish")


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie is dead for our purposes
        status = Path(f"/proc/{pid}/status")
        if status.exists() and "\nState:\tZ" in status.read_text():
            continue
        alive.append(pid)
    return alive


def test_stop_leaves_no_process_and_no_folder(control_plane) -> None:
    cp = LocalControlPlane(control_plane.assets).start()
    pids = [cp.child(n).pid for n in ("etcd", "kube-apiserver", "kube-controller-manager")]
    folder = cp.dir
    print(f"memory after start (MiB): { {k: v >> 20 for k, v in cp.rss_bytes().items()} }")
    cp.stop()
    assert _pids_alive(pids) == []
    assert not folder.exists()


def test_killed_owner_leaves_no_orphans_and_its_folder_is_swept(control_plane) -> None:
    script = (
        "import sys, json, threading\n"
        "from pathlib import Path\n"
        "from rotator_devkit.controlplane.cluster import LocalControlPlane\n"
        "cp = LocalControlPlane(Path(sys.argv[1])).start()\n"
        "pids = [c.pid for c in cp._children.values()]\n"
        "print(json.dumps({'pids': pids, 'dir': str(cp.dir)}), flush=True)\n"
        "threading.Event().wait()\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(control_plane.assets)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    started = json.loads(owner.stdout.readline())
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    wait_for(
        lambda: not _pids_alive(started["pids"]), timeout=20, what="children to die with owner"
    )
    assert Path(started["dir"]) in cluster.sweep_stale()
    assert not Path(started["dir"]).exists()


def test_a_client_without_credentials_is_refused(control_plane, api, namespace) -> None:
    """A bearer token the API server did not issue is refused as unauthenticated (401, not 403);
    the same client with a token it issued gets in, so the refusal is about the token."""
    anonymous = token_client(control_plane, "not-a-token")
    with pytest.raises(errors.Unauthorized):
        anonymous.list(objects.CONFIGMAPS, namespace="default")
    api.create(objects.SERVICEACCOUNTS, {"metadata": {"name": "caller"}}, namespace=namespace)
    token = api.create(
        objects.SERVICEACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        namespace=namespace,
        name="caller",
        subresource="token",
    )["status"]["token"]
    assert token_client(control_plane, token).request("GET", "/version")["gitVersion"] == (
        KUBE_VERSION
    )

"""config/default as a user applies it (3a): ``kubectl kustomize config/default`` with only the
image changed, applied server-side into a fresh cluster. What only a cluster can say: the
restricted namespace admits the Pods, both replicas become Ready through the kubelet's probes,
and the running container is the locked-down process the manifest asks for, talking to the API
server through its ServiceAccount and nothing else. The installation stays for the modules
after this one (tests/kind/conftest.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from controllers.runtime import objects
from tests.kind import install
from tests.kind.cluster import DEPLOYMENTS, Cluster
from tests.kind.conftest import Shipped
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.env import KindEnv
from tests.support.polling import wait_for
from tests.support.reconcilelog import entries

RESTRICTED = "pod-security.kubernetes.io/enforce"

INSPECT = r"""
import json, os, pathlib
status = dict(
    line.split(":\t", 1) for line in pathlib.Path("/proc/1/status").read_text().splitlines()
    if ":\t" in line
)
def writable(path):
    probe = pathlib.Path(path) / ".rotator-kind-probe"
    try:
        probe.write_text("x")
    except OSError as exc:
        return exc.strerror
    probe.unlink()
    return "writable"
environ = pathlib.Path("/proc/1/environ").read_bytes().split(b"\0")
names = sorted(e.split(b"=", 1)[0].decode() for e in environ if e)
env = dict(e.decode().split("=", 1) for e in environ if e)
home = pathlib.Path(env.get("HOME") or "/nonexistent")
print(json.dumps({
    "uid": status["Uid"].split(), "gid": status["Gid"].split(),
    "cap": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status.get("NoNewPrivs", "").strip(),
    "seccomp": status.get("Seccomp", "").strip(),
    "root": writable("/"), "tmp": writable("/tmp"),
    "root_mount": [
        line.split()[3].split(",") for line in pathlib.Path("/proc/1/mounts").read_text().splitlines()
        if line.split()[1] == "/"
    ],
    "env_names": names,
    "service": [env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")],
    "cmdline": pathlib.Path("/proc/1/cmdline").read_bytes().decode().split("\0"),
    # a kubeconfig the process could read (one it may not read cannot configure it)
    "kubeconfig_files": [
        str(p) for p in (home / ".kube" / "config", pathlib.Path("/root/.kube/config"))
        if os.access(p, os.R_OK)
    ],
    "token": pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file(),
}))
"""

PRIVILEGED = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "privileged-probe", "namespace": install.NAMESPACE},
    "spec": {
        "containers": [{"name": "c", "image": "unused", "securityContext": {"privileged": True}}]
    },
}


def inspect(cluster: Cluster, pod: str) -> dict[str, Any]:
    out = cluster.exec_python(install.NAMESPACE, pod, INSPECT, container=install.CONTAINER)
    found: dict[str, Any] = json.loads(out)
    return found


def starting_lines(logs: ControllerLogs, pod: str) -> list[dict[str, Any]]:
    return [e for _, e in entries(logs.text(pod)) if e.get("event") == "rotator.starting"]


def test_config_default_as_shipped_runs_two_ready_replicas_in_a_restricted_namespace(
    kind_env: KindEnv, cluster: Cluster, shipped: Shipped, figure: Callable[..., None]
) -> None:
    figure("install", seconds_apply_to_both_ready=shipped.seconds_to_ready)
    raw = cluster.kustomize(install.SHIPPED)
    changed = [
        (a["kind"], a["metadata"]["name"]) for a, b in zip(raw, shipped.docs, strict=True) if a != b
    ]
    assert changed == [("Deployment", install.DEPLOYMENT)], "only the Deployment (its image)"
    shipped_container = install.deployment_of(raw)["spec"]["template"]["spec"]["containers"][0]
    applied_container = install.deployment_of(shipped.docs)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert {**shipped_container, "image": kind_env.image} == applied_container

    namespace = cluster.get(objects.NAMESPACES, install.NAMESPACE)
    assert namespace is not None
    assert namespace["metadata"]["labels"].get(RESTRICTED) == "restricted"
    refused = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps(PRIVILEGED), check=False
    )
    assert refused.returncode != 0, "a privileged Pod is refused"
    assert "violates PodSecurity" in refused.stderr, "by the restricted profile"

    deployment = cluster.get(DEPLOYMENTS, install.DEPLOYMENT, install.NAMESPACE)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    pods = install.rolled_out(cluster)
    assert pods is not None, "rolled out"
    assert len(pods) == 2, "both replicas Ready"
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"], status
        assert status["restartCount"] == 0, status
        assert pod["spec"]["containers"][0]["image"] == kind_env.image
        assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert install.leader(cluster) in {p["metadata"]["name"] for p in pods}, "one of them leads"


def test_the_running_container_is_uid_65532_with_a_read_only_root_and_no_capabilities(
    cluster: Cluster, shipped: Shipped
) -> None:
    for pod in install.controller_pods(cluster):
        seen = inspect(cluster, pod["metadata"]["name"])
        assert set(seen["uid"]) == {"65532"}, seen["uid"]
        assert set(seen["gid"]) == {"65532"}, seen["gid"]
        assert set(seen["cap"].values()) == {"0000000000000000"}, seen["cap"]
        assert seen["no_new_privs"] == "1", "allowPrivilegeEscalation: false"
        assert seen["seccomp"] == "2", "seccomp filter mode (RuntimeDefault)"
        assert seen["root"] == "Read-only file system", seen["root"]
        assert seen["root_mount"], "/ is a mount"
        assert "ro" in seen["root_mount"][-1], seen["root_mount"]
        assert seen["tmp"] == "writable", "/tmp is the emptyDir"


def test_kubelet_probes_are_served_on_healthz_and_readyz(
    cluster: Cluster, shipped: Shipped
) -> None:
    check = (
        "import urllib.request as u\n"
        "print(*(u.urlopen(f'http://127.0.0.1:8081/{p}', timeout=5).status"
        " for p in ('healthz', 'readyz')))"
    )
    for pod in install.controller_pods(cluster):
        container = pod["spec"]["containers"][0]
        probes = {k: container[k]["httpGet"] for k in ("livenessProbe", "readinessProbe")}
        assert probes == {
            "livenessProbe": {"path": "/healthz", "port": "probes", "scheme": "HTTP"},
            "readinessProbe": {"path": "/readyz", "port": "probes", "scheme": "HTTP"},
        }
        assert {"name": "probes", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"], "the readiness probe passed"
        assert status["restartCount"] == 0, "the liveness probe held"
        name = pod["metadata"]["name"]
        answer = cluster.exec_python(install.NAMESPACE, name, check, container=install.CONTAINER)
        assert answer.split() == ["200", "200"]


def test_the_controller_talks_to_the_api_server_through_its_in_cluster_config_only(
    cluster: Cluster, shipped: Shipped, controller_logs: ControllerLogs
) -> None:
    controller_logs.follow()
    for pod in install.controller_pods(cluster):
        name = pod["metadata"]["name"]
        seen = inspect(cluster, name)
        assert "KUBECONFIG" not in seen["env_names"], seen["env_names"]
        assert seen["kubeconfig_files"] == [], seen["kubeconfig_files"]
        assert seen["token"], "the ServiceAccount token is mounted"
        assert not any(a.startswith("--kubeconfig") for a in seen["cmdline"]), seen["cmdline"]
        host, port = seen["service"]
        assert host, "KUBERNETES_SERVICE_HOST is set by the kubelet"
        assert port, "KUBERNETES_SERVICE_PORT is set by the kubelet"
        starting = wait_for(
            functools.partial(starting_lines, controller_logs, name),
            timeout=20,
            what=f"{name}'s rotator.starting line in its log",
        )
        assert starting[0]["server"] == f"https://{host}:{port}", starting[0]["server"]
        assert pod["spec"]["serviceAccountName"] == "rotator-controller-manager"

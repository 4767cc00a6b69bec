"""The Helm chart against a real API server: ``helm template`` with the defaults and with every
value set is admitted by a server-side dry run with strict field validation (a misspelt or
misplaced field in a template fails here, where a client-side render would not notice), and the
script ``helm test`` runs passes against a running controller, with nothing but the test's Role.

Each render goes to a namespace of the test's own as the release namespace, so the dry run
checks names and references there without touching rotator-system; the ServiceMonitor and the
PrometheusRule are checked against stand-ins of the Prometheus Operator's CRDs (tests/e2e/data,
installed on the local control plane)."""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from controllers.runtime.objects import Resource
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.support import helm
from tests.support.controller import ControllerProcess
from tests.support.existing import ExistingCluster
from tests.support.helm import Case

pytestmark = pytest.mark.oldest_kubernetes

SERVICE_MONITOR_CRD = Path(__file__).parent / "data" / "servicemonitor-crd.yaml"
PROMETHEUS_RULE_CRD = Path(__file__).parent / "data" / "prometheusrule-crd.yaml"
KINDS: dict[str, Resource] = {
    **manifests.KINDS,
    "ConfigMap": Resource("", "v1", "configmaps", "ConfigMap"),
    "Pod": Resource("", "v1", "pods", "Pod"),
    "PodDisruptionBudget": Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    "Lease": objects.LEASES,
    "ServiceMonitor": Resource("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"),
    "PrometheusRule": Resource("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule"),
}
OPERATOR_KINDS = ("ServiceMonitor", "PrometheusRule")
"""The Prometheus Operator's kinds: dry-run only where their API is served."""


def every_knob(watched: list[str]) -> dict[str, Any]:
    """Every value of values.yaml set to something other than its default (one render)."""
    return {
        "image": {
            "repository": "registry.example/rotator",
            "tag": "v1.2.3",
            "pullPolicy": "Always",
            "pullSecrets": ["regcred"],
        },
        "replicas": 3,
        "leaderElection": {"enabled": True},
        "sharding": {"shards": 6},  # its Role and RoleBinding, and --shards=6, admitted too
        "resources": {
            "requests": {"cpu": "50m", "memory": "96Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "podDisruptionBudget": {"enabled": True, "minAvailable": None, "maxUnavailable": "50%"},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "controllers",
                "effect": "NoSchedule",
            }
        ],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rotator"}},
                        },
                    }
                ]
            }
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rotator"}},
            }
        ],
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/owner": "platform"},
        "serviceAccount": {
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/rotator"}
        },
        "extraArgs": ["--workers=8"],
        "extraEnv": [{"name": "AWS_REGION", "value": "eu-west-1"}],
        "extraVolumes": [
            {"name": "issuer-ca", "configMap": {"name": "issuer-ca"}},
            {
                "name": "agent-token",
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "path": "token",
                                "audience": "pods.eks.amazonaws.com",
                                "expirationSeconds": 3600,
                            }
                        }
                    ]
                },
            },
        ],
        "extraVolumeMounts": [
            {"name": "issuer-ca", "mountPath": "/etc/rotator/ca", "readOnly": True},
            {"name": "agent-token", "mountPath": "/var/run/secrets/agent", "readOnly": True},
        ],
        "controllerIdentityNamespaces": watched[:1],
        "watchNamespaces": watched,
        "metrics": {
            "secure": True,
            "serviceMonitor": {
                "enabled": True,
                "interval": "30s",
                "labels": {"release": "prom"},
                "tlsConfig": {"insecureSkipVerify": True},
            },
            "networkPolicy": {
                "enabled": True,
                "metricsFrom": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
                "apiServer": {"cidrs": ["10.96.0.1/32"], "ports": [443, 6443]},
                "extraEgress": [
                    {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
                ],
            },
            "prometheusRule": {
                "enabled": True,
                "labels": {"release": "prom"},
                "selector": 'job="rotator"',
                "runbookURL": "https://docs.example/rotator/",
            },
            "grafanaDashboard": {
                "enabled": True,
                "labels": {"grafana_dashboard": "1"},
                "annotations": {"grafana_folder": "rotator"},
            },
        },
        "podSecurityContext": {"fsGroup": 65532},
        "securityContext": {"runAsNonRoot": True},
        "logLevel": "debug",
        "logFormat": "text",
        "crds": {"enabled": True, "keep": False},
        "tests": {
            "image": {
                "repository": "registry.example/python",
                "tag": "3.11-slim",
                "pullPolicy": "IfNotPresent",
            }
        },
    }


def apply(api: clients.Client, docs: list[dict[str, Any]], *, dry_run: bool) -> None:
    """``kubectl apply --server-side [--dry-run=server]`` with kubectl's strict field validation:
    an unknown or duplicate field is an error, not a warning."""
    for doc in docs:
        resource = KINDS[doc["kind"]]
        query = [
            ("fieldManager", "rotator-chart-test"),
            ("force", "true"),
            ("fieldValidation", "Strict"),
        ]
        if dry_run:
            query.append(("dryRun", "All"))
        path = resource.path(namespace=objects.namespace(doc) or None, name=objects.name(doc))
        try:
            api.request(
                "PATCH", path, query=query, body=doc, content_type=str(clients.PatchType.APPLY)
            )
        except errors.ApiError as e:
            raise AssertionError(f"{helm.identity(doc)} refused: {e}") from e


@pytest.fixture(scope="module")
def operator_crds(control_plane: LocalControlPlane, api: clients.Client) -> None:
    """The ServiceMonitor and PrometheusRule CRDs, on the local control plane only (a kept
    cluster is not ours to add CRDs to: there each is checked only if its API is already served)."""
    crds = manifests.KINDS["CustomResourceDefinition"]
    if isinstance(control_plane, ExistingCluster):
        return
    for path in (SERVICE_MONITOR_CRD, PROMETHEUS_RULE_CRD):
        manifests.apply(api, manifests.load_file(path))

    def established(name: str) -> bool:
        conditions = (api.get(crds, name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    for name in ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"):
        manifests.wait(functools.partial(established, name), what=f"CRD {name} established")


def served(api: clients.Client, resource: Resource) -> bool:
    try:
        api.request("GET", resource.path(namespace="default"))
    except errors.NotFound:
        return False
    return True


@pytest.fixture
def watched(api: clients.Client) -> Iterator[list[str]]:
    """Two namespaces of the test's own for watchNamespaces (their Roles must land somewhere)."""
    names = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        api.create(objects.NAMESPACES, {"metadata": {"name": name}})
    yield names
    for name in names:
        with contextlib.suppress(errors.NotFound):
            api.delete(objects.NAMESPACES, name)


def admitted(api: clients.Client, render: helm.Render, namespace: str) -> set[str]:
    """Dry-runs every object; the test Pod's ServiceAccount is created for real first (the API
    server's ServiceAccount admission looks it up, even in a dry run). Returns the kinds."""
    docs = [
        d for d in render.docs if d["kind"] not in OPERATOR_KINDS or served(api, KINDS[d["kind"]])
    ]
    accounts = [
        d for d in docs if d["kind"] == "ServiceAccount" and helm.identity(d)[2] == namespace
    ]
    apply(api, accounts, dry_run=False)
    apply(api, docs, dry_run=True)
    return {d["kind"] for d in docs}


def test_the_default_render_is_admitted_by_a_server_side_dry_run(
    api: clients.Client, installed: None, namespace: str
) -> None:
    render = helm.template(Case(namespace=namespace, with_tests=True))
    assert not render.error, render.error
    kinds = admitted(api, render, namespace)
    assert {"CustomResourceDefinition", "Deployment", "PodDisruptionBudget", "Pod"} <= kinds


def test_every_value_set_is_admitted_by_a_server_side_dry_run(
    api: clients.Client, installed: None, operator_crds: None, namespace: str, watched: list[str]
) -> None:
    values = every_knob(watched)
    assert set(values) == set(yaml.safe_load((helm.CHART / "values.yaml").read_text())), (
        "every top-level value of values.yaml is set here"
    )
    render = helm.template(Case(values, namespace=namespace, with_tests=True))
    assert not render.error, render.error
    kinds = admitted(api, render, namespace)
    assert {"NetworkPolicy", "PodDisruptionBudget", "Role", "Pod", "ConfigMap"} <= kinds
    for kind in OPERATOR_KINDS:
        if served(api, KINDS[kind]):
            assert kind in kinds


def test_a_misplaced_field_is_refused_by_the_strict_dry_run(
    api: clients.Client, installed: None, namespace: str
) -> None:
    """The check above can fail: a toleration in the container instead of the pod is refused."""
    render = helm.template(Case(namespace=namespace))
    deployment = render.one("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["tolerations"] = [
        {"operator": "Exists"}
    ]
    with pytest.raises(AssertionError, match="tolerations: field not declared in schema"):
        apply(api, [deployment], dry_run=True)


def test_a_misplaced_rule_field_is_refused_by_the_strict_dry_run(
    api: clients.Client, installed: None, operator_crds: None, namespace: str
) -> None:
    """The PrometheusRule stand-in can refuse: an alert's severity beside its labels instead of
    in them."""
    if not served(api, KINDS["PrometheusRule"]):
        pytest.skip("no PrometheusRule API on this cluster")
    render = helm.template(
        Case({"metrics": {"prometheusRule": {"enabled": True}}}, namespace=namespace)
    )
    rule = render.one("PrometheusRule")
    apply(api, [rule], dry_run=True)
    rule["spec"]["groups"][0]["rules"][0]["severity"] = "critical"
    with pytest.raises(AssertionError, match="severity: field not declared in schema"):
        apply(api, [rule], dry_run=True)


def test_the_helm_test_script_passes_against_a_running_controller(
    control_plane: LocalControlPlane,
    api: clients.Client,
    controller: ControllerProcess,
    namespace: str,
    tmp_path: Path,
) -> None:
    """files/helm-test.py, as the test Pod runs it, with the token of the chart's test
    ServiceAccount bound only to the chart's test Role, against the suite's controller: its
    /readyz, then a sample chain Ready. Afterwards the chain is gone."""
    render = helm.template(Case(namespace=namespace, with_tests=True))
    name = "rotator-helm-test"
    rbac = [
        d
        for d in render.docs
        if helm.identity(d)[1:] == (name, namespace)
        and d["kind"] in ("ServiceAccount", "Role", "RoleBinding")
    ]
    assert len(rbac) == 3
    apply(api, rbac, dry_run=False)
    token = api.create(
        objects.SERVICEACCOUNTS,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        namespace=namespace,
        name=name,
        subresource="token",
    )["status"]["token"]
    token_file = tmp_path / "token"
    token_file.write_text(token)
    assert controller.proc is not None
    pod = render.by_identity()[("Pod", name, namespace)]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["ROTATOR_TEST_NAMESPACE"] == namespace
    env |= {
        "ROTATOR_TEST_READYZ_URL": f"http://127.0.0.1:{controller.proc.probe_port}/readyz",
        "ROTATOR_TEST_API_SERVER": control_plane.server,
        "ROTATOR_TEST_TOKEN_FILE": str(token_file),
        "ROTATOR_TEST_CA_FILE": str(control_plane.ca_file),
        "ROTATOR_TEST_TIMEOUT": "90",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, str(helm.CHART / "files" / "helm-test.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        f"ok: {env['ROTATOR_TEST_READYZ_URL']} answers 200",
        "ok: the policy is Ready",
        "ok: the backend has ResolvedRefs",
        "ok: the route has ResolvedRefs",
        "ok: the route is Programmed",
        "rotator passed its helm test",
    ]
    for resource in ("backendsecuritypolicies", "servicebackends", "routes"):
        listed = api.request("GET", f"/apis/rotator.dev/v1alpha1/namespaces/{namespace}/{resource}")
        assert listed["items"] == [], resource


def test_helm_install_dry_run_against_the_api_server_prints_the_notes(
    control_plane: LocalControlPlane, api: clients.Client, installed: None, namespace: str
) -> None:
    """``helm install --dry-run=server``: Helm's own checks against the API server (its
    capabilities, no conflict with what exists: another release name, and the CRDs left to
    config/ here), and NOTES.txt with the lines a first look needs."""
    argv = [str(helm.binary()), "install", "notes", str(helm.CHART), "-n", namespace]
    argv += ["--dry-run=server", "--set", "crds.enabled=false"]
    out = subprocess.run(
        [*argv, "--kubeconfig", str(control_plane.kubeconfig)],
        env=helm.environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    notes = out.stdout.split("\nNOTES:\n", 1)[1]
    for line in (
        f"kubectl -n {namespace} rollout status deployment/notes-rotator-controller-manager",
        "kubectl get rotator -A",
        "rotator status bsp/NAME -n NAMESPACE",
        f"helm test notes -n {namespace}",
        "It watches every namespace (ClusterRole notes-rotator-manager-role).",
    ):
        assert line in notes, notes

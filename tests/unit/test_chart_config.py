"""One source of truth: the chart's default render gives the objects of config/default, and with
watchNamespaces those of config/namespaced — the same RBAC rules, Deployment spec, probes and
security contexts — once Helm's own labels and annotations are set aside, so the two cannot
drift. The differences are three, all stated here: the Namespace (Helm installs into a release
namespace that it, not the chart, creates), the PodDisruptionBudget that two replicas bring, and
the empty leader-election Lease (rendered so that helm uninstall deletes it).
Also: values.schema.json turns a misspelt or mistyped value away with a message naming it; and the
chart admits Kubernetes from the oldest version tested on (make test-oldest), no older."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support import helm, kubeversion
from tests.support.helm import Case, Identity, Render

NS = helm.NAMESPACE
ONLY_IN_CONFIG: set[Identity] = {("Namespace", NS, "")}
ONLY_IN_CHART: set[Identity] = {
    ("PodDisruptionBudget", "rotator-controller-manager", NS),
    # empty, so that helm uninstall deletes it (config/default's goes with its Namespace)
    ("Lease", "rotator-leader-election", NS),
}


def normalised(docs: list[dict[str, Any]]) -> dict[Identity, dict[str, Any]]:
    return {helm.identity(d): helm.without_helm_metadata(d) for d in docs}


MISTAKES: dict[str, tuple[dict[str, Any], str]] = {
    "misspelt top-level key": (
        {"replica": 3},
        "at '': additional properties 'replica' not allowed",
    ),
    "misspelt nested key": (
        {"image": {"tga": "v1"}},
        "at '/image': additional properties 'tga' not allowed",
    ),
    "misspelt metrics key": (
        {"metrics": {"serviceMonitor": {"enable": True}}},
        "at '/metrics/serviceMonitor': additional properties 'enable' not allowed",
    ),
    "replicas as a string": ({"replicas": "two"}, "at '/replicas': got string, want integer"),
    "leaderElection as a boolean": (
        {"leaderElection": True},
        "at '/leaderElection': got boolean, want object",
    ),
    "logLevel not a level": (
        {"logLevel": "verbose"},
        "at '/logLevel': value must be one of '', 'debug', 'info', 'warning', 'error'",
    ),
    "logFormat not a format": (
        {"logFormat": "yaml"},
        "at '/logFormat': value must be one of '', 'json', 'text'",
    ),
    "pullPolicy misspelt": (
        {"image": {"pullPolicy": "IfNotPresnt"}},
        "at '/image/pullPolicy': value must be one of",
    ),
    "a namespace that is no name": (
        {"watchNamespaces": ["Team_A"]},
        "at '/watchNamespaces/0': 'Team_A' does not match pattern",
    ),
    "an extra arg that is no flag": (
        {"extraArgs": ["workers=8"]},
        "at '/extraArgs/0': 'workers=8' does not match pattern '^-'",
    ),
    "extraEnv without a name": (
        {"extraEnv": [{"value": "x"}]},
        "at '/extraEnv/0': missing property 'name'",
    ),
    "extraVolumeMounts without a mountPath": (
        {"extraVolumeMounts": [{"name": "issuer-ca"}]},
        "at '/extraVolumeMounts/0': missing property 'mountPath'",
    ),
    "extraVolumes without a name": (
        {"extraVolumes": [{"configMap": {"name": "issuer-ca"}}]},
        "at '/extraVolumes/0': missing property 'name'",
    ),
    "podLabels with a number": (
        {"podLabels": {"tier": 1}},
        "at '/podLabels/tier': got number, want string",
    ),
    "minAvailable not a count or percentage": (
        {"podDisruptionBudget": {"minAvailable": "half"}},
        "at '/podDisruptionBudget/minAvailable': 'half' does not match pattern",
    ),
    "crds.keep as a string": (
        {"crds": {"keep": "yes"}},
        "at '/crds/keep': got string, want boolean",
    ),
    "an API server CIDR that is no CIDR": (
        {"metrics": {"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.1"]}}}},
        "at '/metrics/networkPolicy/apiServer/cidrs/0': '10.0.0.1' does not match pattern",
    ),
    "a prometheusRule selector that is no label matcher": (
        {"metrics": {"prometheusRule": {"selector": "rotator"}}},
        "at '/metrics/prometheusRule/selector': 'rotator' does not match pattern",
    ),
    "two replicas without leader election": (
        {"leaderElection": {"enabled": False}},
        "leaderElection.enabled=false needs replicas: 1",
    ),
    "a PodDisruptionBudget with both bounds": (
        {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}},
        "podDisruptionBudget: set at most one of minAvailable and maxUnavailable",
    ),
    "no shards": ({"sharding": {"shards": 0}}, "at '/sharding/shards': minimum: got 0, want 1"),
    "more shards than the hash ranges allow": (
        {"sharding": {"shards": 2000}},
        "at '/sharding/shards': maximum: got 2,000, want 1,024",
    ),
    "shards as a string": (
        {"sharding": {"shards": "6"}},
        "at '/sharding/shards': got string, want integer",
    ),
    "shards without leader election": (
        {"sharding": {"shards": 6}, "leaderElection": {"enabled": False}, "replicas": 1},
        "sharding.shards=6 needs leaderElection.enabled=true",
    ),
    # what the restricted Pod Security Standard forbids, refused before the namespace does
    "a privileged container": (
        {"securityContext": {"privileged": True}},
        "at '/securityContext/privileged': value must be false",
    ),
    "privilege escalation": (
        {"securityContext": {"allowPrivilegeEscalation": True}},
        "at '/securityContext/allowPrivilegeEscalation': value must be false",
    ),
    "an added capability": (
        {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
        "at '/securityContext/capabilities/add': maxItems: got 1, want 0",
    ),
    "capabilities not all dropped": (
        {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
        "at '/securityContext/capabilities/drop'",
    ),
    "root": (
        {"podSecurityContext": {"runAsUser": 0}},
        "at '/podSecurityContext/runAsUser': minimum: got 0, want 1",
    ),
    "runAsNonRoot off": (
        {"podSecurityContext": {"runAsNonRoot": False}},
        "at '/podSecurityContext/runAsNonRoot': value must be true",
    ),
    "the security context removed": (
        {"securityContext": None},
        "at '': missing property 'securityContext'",
    ),
}


@pytest.fixture(scope="module")
def renders() -> dict[str, Render]:
    return helm.template_all(
        {
            "defaults": Case(),
            "namespaced": Case({"watchNamespaces": ["team-a", "team-b"]}),
            **{name: Case(values) for name, (values, _) in MISTAKES.items()},
        }
    )


def test_the_default_render_is_config_default(renders: dict[str, Render]) -> None:
    chart = normalised(renders["defaults"].docs)
    config = normalised(helm.kustomize(helm.REPO / "config" / "default"))
    assert config.keys() - chart.keys() == ONLY_IN_CONFIG
    assert chart.keys() - config.keys() == ONLY_IN_CHART
    for key in chart.keys() & config.keys():
        assert chart[key] == config[key], key


def test_with_watch_namespaces_the_render_is_config_namespaced(renders: dict[str, Render]) -> None:
    chart = normalised(renders["namespaced"].docs)
    config = normalised(helm.kustomize(helm.REPO / "config" / "namespaced"))
    assert config.keys() - chart.keys() == ONLY_IN_CONFIG
    assert chart.keys() - config.keys() == ONLY_IN_CHART
    for key in chart.keys() & config.keys():
        assert chart[key] == config[key], key


def test_the_chart_crds_are_config_crd_bases_byte_for_byte() -> None:
    bases = helm.REPO / "config" / "crd" / "bases"
    copies = helm.CHART / "files" / "crds"
    assert sorted(p.name for p in copies.glob("*.yaml")) == sorted(
        p.name for p in bases.glob("*.yaml")
    )
    for base in bases.glob("*.yaml"):
        assert (copies / base.name).read_bytes() == base.read_bytes(), (
            f"{copies / base.name} is stale: cp config/crd/bases/*.yaml charts/rotator/files/crds/"
        )


def test_the_chart_admits_kubernetes_from_the_oldest_tested_minor_and_the_docs_say_so() -> None:
    """What is not tested is not claimed: the chart's floor is the minor of the version pinned in
    hack/controlplane/kubernetes-oldest (the subset make test-oldest runs on it); its server-side
    dry run there (tests/e2e/test_chart.py) shows the chart admits that version."""
    oldest = kubeversion.pinned("oldest")
    minor = ".".join(oldest.split(".")[:2])
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={minor.removeprefix('v')}.0-0"
    operations = (helm.REPO / "docs" / "operations.md").read_text()
    assert f"| {minor} ({oldest}) | yes, tested |" in operations
    assert f'`kubeVersion: "{chart["kubeVersion"]}"`' in operations


def test_the_namespace_label_config_default_sets_is_the_one_the_readme_applies() -> None:
    (namespace,) = [
        d for d in helm.kustomize(helm.REPO / "config" / "default") if d["kind"] == "Namespace"
    ]
    labels = {
        k: v for k, v in namespace["metadata"]["labels"].items() if k != "app.kubernetes.io/part-of"
    }
    assert labels == {"pod-security.kubernetes.io/enforce": "restricted"}
    readme = (helm.REPO / "README.md").read_text()
    assert f"kubectl label namespace {NS} pod-security.kubernetes.io/enforce=restricted" in readme
    assert "helm install rotator charts/rotator" in readme


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_misspelt_or_mistyped_value_is_refused_with_a_message_naming_it(
    renders: dict[str, Render], mistake: str
) -> None:
    render = renders[mistake]
    assert not render.docs
    assert MISTAKES[mistake][1] in render.error

"""Each value of charts/rotator changes what it says and nothing else: the chart is rendered with
its defaults and with the value set (every render in one parallel batch), and the difference,
object by object and leaf by leaf, must be exactly the expected one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm
from tests.support.helm import REMOVED, Case, Diff, Identity, Path_, Render

NS = helm.NAMESPACE
DEPLOYMENT: Identity = ("Deployment", "rotator-controller-manager", NS)
PDB: Identity = ("PodDisruptionBudget", "rotator-controller-manager", NS)
SERVICE: Identity = ("Service", "rotator-controller-manager-metrics-service", NS)
POD: Path_ = ("spec", "template", "spec")
CONTAINER: Path_ = (*POD, "containers", 0)
ARGS: Path_ = (*CONTAINER, "args")
DEFAULT_ARGS = [
    "run",
    "--leader-elect",
    "--metrics-bind-address=:8443",
    "--metrics-secure=true",
    "--health-probe-bind-address=:8081",
]
CRDS = {
    ("CustomResourceDefinition", f"{plural}.rotator.dev", "")
    for plural in ("backendsecuritypolicies", "servicebackends", "routes")
}
LEADER_ELECTION = {
    ("Role", "rotator-leader-election-role", NS),
    ("RoleBinding", "rotator-leader-election-rolebinding", NS),
    ("Lease", "rotator-leader-election", NS),
}
MANAGER_CLUSTER_RBAC = {
    ("ClusterRole", "rotator-manager-role", ""),
    ("ClusterRoleBinding", "rotator-manager-rolebinding", ""),
}
SHARDING_RBAC = {
    ("Role", "rotator-sharding-role", NS),
    ("RoleBinding", "rotator-sharding-rolebinding", NS),
}
SHARDED_ARGS = [*DEFAULT_ARGS[:2], "--shards=6", *DEFAULT_ARGS[2:]]
METRICS_RBAC = {
    ("ClusterRole", "rotator-metrics-auth-role", ""),
    ("ClusterRoleBinding", "rotator-metrics-auth-rolebinding", ""),
    ("ClusterRole", "rotator-metrics-reader", ""),
}


def at(prefix: Path_, value: Any) -> dict[Path_, Any]:
    """The leaves ``value`` puts under ``prefix``."""
    return helm.flatten(value, prefix)


def deployment(*leaves: dict[Path_, Any]) -> dict[Identity, dict[Path_, Any]]:
    return {DEPLOYMENT: {k: v for leaf in leaves for k, v in leaf.items()}}


def expect(
    changed: dict[Identity, dict[Path_, Any]] | None = None,
    added: set[Identity] | None = None,
    removed: set[Identity] | None = None,
) -> Diff:
    return Diff(added=added or set(), removed=removed or set(), changed=changed or {})


AFFINITY = {
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
}
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "controllers", "effect": "NoSchedule"}
]
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rotator"}},
    }
]
ENV = [
    {"name": "AWS_REGION", "value": "eu-west-1"},
    {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
]
VOLUME = {"name": "issuer-ca", "configMap": {"name": "issuer-ca"}}
MOUNT = {"name": "issuer-ca", "mountPath": "/etc/rotator/ca", "readOnly": True}

KNOBS: dict[str, tuple[dict[str, Any], Diff]] = {
    "image": (
        {
            "image": {
                "repository": "registry.example/rotator",
                "tag": "v1.2.3",
                "pullPolicy": "Always",
                "pullSecrets": ["regcred"],
            }
        },
        expect(
            deployment(
                {
                    (*CONTAINER, "image"): "registry.example/rotator:v1.2.3",
                    (*CONTAINER, "imagePullPolicy"): "Always",
                    (*POD, "imagePullSecrets", 0, "name"): "regcred",
                }
            )
        ),
    ),
    "replicas above one keep the PodDisruptionBudget": (
        {"replicas": 3},
        expect(deployment({("spec", "replicas"): 3})),
    ),
    "one replica drops the PodDisruptionBudget": (
        {"replicas": 1},
        expect(deployment({("spec", "replicas"): 1}), removed={PDB}),
    ),
    "leaderElection off": (
        {"leaderElection": {"enabled": False}, "replicas": 1},
        expect(
            deployment(
                {("spec", "replicas"): 1, ARGS: [a for a in DEFAULT_ARGS if a != "--leader-elect"]}
            ),
            removed={PDB} | LEADER_ELECTION,
        ),
    ),
    "sharding.shards": (
        {"sharding": {"shards": 6}},
        expect(
            {
                **deployment({ARGS: SHARDED_ARGS}),
                # at most one replica, and its shards, away at a time
                PDB: {("spec", "minAvailable"): REMOVED, ("spec", "maxUnavailable"): 1},
            },
            added=SHARDING_RBAC,
        ),
    ),
    "sharding.shards 1 is the default": ({"sharding": {"shards": 1}}, expect()),
    "sharding.shards with one replica, which takes them all": (
        {"sharding": {"shards": 6}, "replicas": 1},
        expect(
            deployment({("spec", "replicas"): 1, ARGS: SHARDED_ARGS}),
            added=SHARDING_RBAC,
            removed={PDB},
        ),
    ),
    "sharding.shards keeps a minAvailable that is set": (
        {"sharding": {"shards": 6}, "replicas": 4, "podDisruptionBudget": {"minAvailable": 3}},
        expect(
            {
                **deployment({("spec", "replicas"): 4, ARGS: SHARDED_ARGS}),
                PDB: {("spec", "minAvailable"): 3},
            },
            added=SHARDING_RBAC,
        ),
    ),
    "resources merge into the defaults": (
        {"resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "256Mi"}}},
        expect(
            deployment(
                {
                    (*CONTAINER, "resources", "requests", "cpu"): "50m",
                    (*CONTAINER, "resources", "limits", "memory"): "256Mi",
                }
            )
        ),
    ),
    "podDisruptionBudget off": (
        {"podDisruptionBudget": {"enabled": False}},
        expect(removed={PDB}),
    ),
    "podDisruptionBudget on with one replica": (
        {"replicas": 1, "podDisruptionBudget": {"enabled": True}},
        expect(deployment({("spec", "replicas"): 1})),
    ),
    "podDisruptionBudget maxUnavailable": (
        {"podDisruptionBudget": {"maxUnavailable": 1}},
        expect({PDB: {("spec", "minAvailable"): REMOVED, ("spec", "maxUnavailable"): 1}}),
    ),
    "podDisruptionBudget minAvailable": (
        {"podDisruptionBudget": {"minAvailable": "50%"}},
        expect({PDB: {("spec", "minAvailable"): "50%"}}),
    ),
    "priorityClassName": (
        {"priorityClassName": "system-cluster-critical"},
        expect(deployment({(*POD, "priorityClassName"): "system-cluster-critical"})),
    ),
    "nodeSelector": (
        {"nodeSelector": {"kubernetes.io/os": "linux"}},
        expect(deployment(at((*POD, "nodeSelector"), {"kubernetes.io/os": "linux"}))),
    ),
    "tolerations": (
        {"tolerations": TOLERATIONS},
        expect(deployment(at((*POD, "tolerations"), TOLERATIONS))),
    ),
    "affinity": ({"affinity": AFFINITY}, expect(deployment(at((*POD, "affinity"), AFFINITY)))),
    "topologySpreadConstraints": (
        {"topologySpreadConstraints": SPREAD},
        expect(deployment(at((*POD, "topologySpreadConstraints"), SPREAD))),
    ),
    "podLabels": (
        {"podLabels": {"team": "platform", "azure.workload.identity/use": "true"}},
        expect(
            deployment(
                {
                    ("spec", "template", "metadata", "labels", "team"): "platform",
                    (
                        "spec",
                        "template",
                        "metadata",
                        "labels",
                        "azure.workload.identity/use",
                    ): "true",
                }
            )
        ),
    ),
    "podAnnotations add to and override the prometheus ones": (
        {"podAnnotations": {"example.com/owner": "platform", "prometheus.io/scrape": "false"}},
        expect(
            deployment(
                {
                    (
                        "spec",
                        "template",
                        "metadata",
                        "annotations",
                        "example.com/owner",
                    ): "platform",
                    (
                        "spec",
                        "template",
                        "metadata",
                        "annotations",
                        "prometheus.io/scrape",
                    ): "false",
                }
            )
        ),
    ),
    "serviceAccount annotations": (
        {
            "serviceAccount": {
                "annotations": {
                    "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/rotator"
                }
            }
        },
        expect(
            {
                ("ServiceAccount", "rotator-controller-manager", NS): {
                    (
                        "metadata",
                        "annotations",
                        "eks.amazonaws.com/role-arn",
                    ): "arn:aws:iam::123456789012:role/rotator"
                }
            }
        ),
    ),
    "extraArgs": (
        {"extraArgs": ["--workers=8", "--sync-period=600"]},
        expect(deployment({ARGS: [*DEFAULT_ARGS, "--workers=8", "--sync-period=600"]})),
    ),
    "extraEnv": ({"extraEnv": ENV}, expect(deployment(at((*CONTAINER, "env"), ENV)))),
    "extraVolumes and extraVolumeMounts": (
        {"extraVolumes": [VOLUME], "extraVolumeMounts": [MOUNT]},
        expect(
            deployment(at((*POD, "volumes", 1), VOLUME), at((*CONTAINER, "volumeMounts", 1), MOUNT))
        ),
    ),
    "controllerIdentityNamespaces": (
        {"controllerIdentityNamespaces": ["team-a", "team-b"]},
        expect(
            deployment({ARGS: [*DEFAULT_ARGS, "--controller-identity-namespaces=team-a,team-b"]})
        ),
    ),
    "controllerIdentityNamespaces for all": (
        {"controllerIdentityNamespaces": ["*"]},
        expect(deployment({ARGS: [*DEFAULT_ARGS, "--controller-identity-namespaces=*"]})),
    ),
    "watchNamespaces": (
        {"watchNamespaces": ["team-a", "team-b"]},
        expect(
            deployment({ARGS: [*DEFAULT_ARGS, "--namespace=team-a", "--namespace=team-b"]}),
            added={
                (kind, name, ns)
                for ns in ("team-a", "team-b")
                for kind, name in (
                    ("Role", "rotator-manager-role"),
                    ("RoleBinding", "rotator-manager-rolebinding"),
                )
            },
            removed=MANAGER_CLUSTER_RBAC,
        ),
    ),
    "metrics over plain HTTP": (
        {"metrics": {"secure": False}},
        expect(
            {
                **deployment(
                    {
                        ARGS: [a.replace("secure=true", "secure=false") for a in DEFAULT_ARGS],
                        (*CONTAINER, "ports", 0, "name"): "http",
                        (
                            "spec",
                            "template",
                            "metadata",
                            "annotations",
                            "prometheus.io/scheme",
                        ): "http",
                    }
                ),
                SERVICE: {
                    ("spec", "ports", 0, "name"): "http",
                    ("spec", "ports", 0, "targetPort"): "http",
                },
            },
            removed=METRICS_RBAC,
        ),
    ),
    "serviceMonitor": (
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        expect(added={("ServiceMonitor", "rotator-controller-manager", NS)}),
    ),
    "networkPolicy": (
        {"metrics": {"networkPolicy": {"enabled": True}}},
        expect(added={("NetworkPolicy", "rotator-controller-manager", NS)}),
    ),
    "prometheusRule": (
        {"metrics": {"prometheusRule": {"enabled": True}}},
        expect(added={("PrometheusRule", "rotator-alerts", NS)}),
    ),
    "grafanaDashboard": (
        {"metrics": {"grafanaDashboard": {"enabled": True}}},
        expect(added={("ConfigMap", "rotator-dashboard", NS)}),
    ),
    "podSecurityContext": (
        {"podSecurityContext": {"fsGroup": 65532}},
        expect(deployment({(*POD, "securityContext", "fsGroup"): 65532})),
    ),
    "securityContext": (
        {"securityContext": {"runAsNonRoot": True}},
        expect(deployment({(*CONTAINER, "securityContext", "runAsNonRoot"): True})),
    ),
    "logLevel": (
        {"logLevel": "debug"},
        expect(deployment({ARGS: [*DEFAULT_ARGS, "--log-level=debug"]})),
    ),
    "logFormat": (
        {"logFormat": "text"},
        expect(deployment({ARGS: [*DEFAULT_ARGS, "--log-format=text"]})),
    ),
    "crds off": ({"crds": {"enabled": False}}, expect(removed=CRDS)),
    "crds not kept": (
        {"crds": {"keep": False}},
        expect(
            {crd: {("metadata", "annotations", "helm.sh/resource-policy"): REMOVED} for crd in CRDS}
        ),
    ),
}

TEST_POD: Identity = ("Pod", "rotator-helm-test", NS)
TEST_CASES = {
    "tests defaults": Case(with_tests=True),
    "tests.image": Case(
        {
            "tests": {
                "image": {
                    "repository": "registry.example/python",
                    "tag": "3.11-slim",
                    "pullPolicy": "Never",
                }
            }
        },
        with_tests=True,
    ),
    "tests with watchNamespaces": Case({"watchNamespaces": ["team-a", "team-b"]}, with_tests=True),
    "tests with networkPolicy": Case(
        {"metrics": {"networkPolicy": {"enabled": True}}}, with_tests=True
    ),
    "serviceMonitor set": Case(
        {
            "metrics": {
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "30s",
                    "labels": {"release": "prom"},
                }
            }
        }
    ),
    "serviceMonitor over http": Case(
        {"metrics": {"secure": False, "serviceMonitor": {"enabled": True}}}
    ),
    "networkPolicy set": Case(
        {
            "metrics": {
                "networkPolicy": {
                    "enabled": True,
                    "metricsFrom": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                            }
                        }
                    ],
                    "apiServer": {"cidrs": ["10.96.0.1/32", "172.18.0.2/32"], "ports": [443, 6443]},
                    "extraEgress": [{"ports": [{"port": 53, "protocol": "UDP"}]}],
                }
            }
        }
    ),
    "another release in another namespace": Case(release="ops", namespace="ops-system"),
}


@pytest.fixture(scope="module")
def renders() -> dict[str, Render]:
    cases = {"defaults": Case(), **{name: Case(values) for name, (values, _) in KNOBS.items()}}
    return helm.template_all({**cases, **TEST_CASES})


@pytest.mark.parametrize("knob", list(KNOBS))
def test_a_value_changes_what_it_says_and_nothing_else(
    renders: dict[str, Render], knob: str
) -> None:
    render = renders[knob]
    assert not render.error, render.error
    assert helm.diff(renders["defaults"], render) == KNOBS[knob][1]


def test_the_helm_test_pod_runs_the_controller_image_by_default(renders: dict[str, Render]) -> None:
    docs = renders["tests defaults"].by_identity()
    (container,) = docs[TEST_POD]["spec"]["containers"]
    assert container["image"] == "rotator:latest"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert docs[TEST_POD]["metadata"]["annotations"]["helm.sh/hook"] == "test"


def test_tests_image_changes_the_test_pod_only(renders: dict[str, Render]) -> None:
    assert helm.diff(renders["tests defaults"], renders["tests.image"]) == expect(
        {
            TEST_POD: {
                ("spec", "containers", 0, "image"): "registry.example/python:3.11-slim",
                ("spec", "containers", 0, "imagePullPolicy"): "Never",
            }
        }
    )


def test_the_helm_test_builds_its_chain_in_a_watched_namespace(renders: dict[str, Render]) -> None:
    docs = renders["tests with watchNamespaces"].by_identity()
    assert ("Role", "rotator-helm-test", "team-a") in docs
    assert ("RoleBinding", "rotator-helm-test", "team-a") in docs
    env = {e["name"]: e["value"] for e in docs[TEST_POD]["spec"]["containers"][0]["env"]}
    assert env["ROTATOR_TEST_NAMESPACE"] == "team-a"


def test_the_helm_test_may_only_create_read_and_delete_its_chain(
    renders: dict[str, Render],
) -> None:
    role = renders["tests defaults"].by_identity()[("Role", "rotator-helm-test", NS)]
    chain = ["backendsecuritypolicies", "servicebackends", "routes"]
    its_own = ["rotator-helm-test"]  # never Helm's release Secrets nor a user's policies
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": its_own,
            "verbs": ["delete"],
        },
        {"apiGroups": ["rotator.dev"], "resources": chain, "verbs": ["create"]},
        {
            "apiGroups": ["rotator.dev"],
            "resources": chain,
            "resourceNames": its_own,
            "verbs": ["get", "delete"],
        },
    ]
    hooks = [
        d
        for d in renders["tests defaults"].docs
        if "helm.sh/hook" in (d["metadata"].get("annotations") or {})
    ]
    assert {d["kind"] for d in hooks} == {
        "Service",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Pod",
    }
    script = renders["tests defaults"].by_identity()[("ConfigMap", "rotator-helm-test", NS)][
        "data"
    ]["helm-test.py"]
    assert script == (helm.CHART / "files" / "helm-test.py").read_text()


def test_the_service_monitor_scrapes_the_metrics_service_with_a_token(
    renders: dict[str, Render],
) -> None:
    monitor = renders["serviceMonitor set"].one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "rotator",
        "app.kubernetes.io/component": "controller",
    }
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "https",
            "path": "/metrics",
            "interval": "30s",
            "scheme": "https",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
        }
    ]
    plain = renders["serviceMonitor over http"].one("ServiceMonitor")
    assert plain["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "scheme": "http"}]


def test_the_network_policy_admits_only_the_metrics_port_and_the_api_server(
    renders: dict[str, Render],
) -> None:
    default = renders["networkPolicy"].one("NetworkPolicy")["spec"]
    assert default["policyTypes"] == ["Ingress", "Egress"]
    assert default["ingress"] == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]
    assert default["egress"] == [
        {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    ]
    spec = renders["networkPolicy set"].one("NetworkPolicy")["spec"]
    assert spec["ingress"] == [
        {
            "ports": [{"port": 8443, "protocol": "TCP"}],
            "from": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ],
        }
    ]
    assert spec["egress"] == [
        {
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
            "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}, {"ipBlock": {"cidr": "172.18.0.2/32"}}],
        },
        {"ports": [{"port": 53, "protocol": "UDP"}]},
    ]
    assert spec["podSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "rotator",
            "app.kubernetes.io/component": "controller",
        }
    }


def test_another_release_name_and_namespace_name_everything_after_them(
    renders: dict[str, Render],
) -> None:
    docs = renders["another release in another namespace"].docs
    assert len(docs) == len(renders["defaults"].docs)
    for doc in docs:
        kind, name, namespace = helm.identity(doc)
        if kind != "CustomResourceDefinition":
            assert name.startswith("ops-rotator-"), (kind, name)
        assert namespace in ("", "ops-system"), (kind, name, namespace)
        for subject in doc.get("subjects", []):
            assert subject == {
                "kind": "ServiceAccount",
                "name": "ops-rotator-controller-manager",
                "namespace": "ops-system",
            }
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"]
        == "ops-rotator-controller-manager"
    )
    # its own Lease, the one the chart renders (two releases in a namespace never share one)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-election-id=ops-rotator-leader-election" in args
    assert ("Lease", "ops-rotator-leader-election", "ops-system") in {
        helm.identity(d) for d in docs
    }


def test_with_the_network_policy_the_helm_test_may_reach_the_probe_port(
    renders: dict[str, Render],
) -> None:
    docs = renders["tests with networkPolicy"].by_identity()
    policy = docs[("NetworkPolicy", "rotator-helm-test-probes", NS)]
    assert policy["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert (
        policy["spec"]["podSelector"]
        == docs[("NetworkPolicy", "rotator-controller-manager", NS)]["spec"]["podSelector"]
    )
    assert policy["spec"]["ingress"] == [
        {
            "ports": [{"port": 8081, "protocol": "TCP"}],
            "from": [
                {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "rotator-helm-test"}}}
            ],
        }
    ]
    assert docs[TEST_POD]["metadata"]["labels"]["app.kubernetes.io/name"] == "rotator-helm-test"
    assert ("NetworkPolicy", "rotator-helm-test-probes", NS) not in renders[
        "tests defaults"
    ].by_identity()


def test_numbers_and_booleans_as_label_and_annotation_values_render_as_strings() -> None:
    """``--set metrics.grafanaDashboard.labels.grafana_dashboard=1`` (Helm reads 1 as a number):
    the schema takes it, and the ConfigMap's label is the string "1" (a Kubernetes label or
    annotation value must be a string); the same for the PrometheusRule's labels and the
    dashboard's annotations. Broken by the schema's "type": "string" for these values (Helm
    refuses the --set), or by a template's toYaml of them (the label renders as the number 1)."""
    argv = [str(helm.binary()), "template", helm.RELEASE, str(helm.CHART), "-n", NS]
    argv += ["--skip-tests", "--set", "metrics.grafanaDashboard.enabled=true"]
    argv += ["--set", "metrics.grafanaDashboard.labels.grafana_dashboard=1"]
    argv += ["--set", "metrics.grafanaDashboard.annotations.grafana_folder=true"]
    argv += ["--set", "metrics.prometheusRule.enabled=true"]
    argv += ["--set", "metrics.prometheusRule.labels.release=2"]
    argv += ["--set", "metrics.prometheusRule.labels.prometheus=kube-prometheus"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, env=helm.environment())
    assert out.returncode == 0, out.stderr
    docs = {helm.identity(d): d for d in yaml.safe_load_all(out.stdout) if d}
    board = docs[("ConfigMap", "rotator-dashboard", NS)]["metadata"]
    assert board["labels"]["grafana_dashboard"] == "1"
    assert board["annotations"] == {"grafana_folder": "true"}
    rule = docs[("PrometheusRule", "rotator-alerts", NS)]["metadata"]["labels"]
    assert rule["release"] == "2"
    assert rule["prometheus"] == "kube-prometheus"
    assert rule["app.kubernetes.io/part-of"] == "rotator", "the chart's own labels stay"


def test_a_label_value_that_is_a_mapping_is_refused() -> None:
    """The schema still says what a label value is: not a mapping."""
    render = helm.template(
        Case({"metrics": {"grafanaDashboard": {"enabled": True, "labels": {"a": {"b": "c"}}}}})
    )
    assert render.error, "a mapping as a label value is refused"


def test_the_sharding_role_is_config_sharding(renders: dict[str, Render]) -> None:
    """The chart's Role for shards has config/sharding's rules (list the Leases, and get, create
    and update them: the shards' and the replicas' membership Leases, in the release namespace),
    bound to the controller's ServiceAccount; without shards neither is rendered."""
    config = yaml.safe_load((helm.REPO / "config" / "sharding" / "sharding_role.yaml").read_text())
    docs = renders["sharding.shards"].by_identity()
    role = docs[("Role", "rotator-sharding-role", NS)]
    assert role["rules"] == config["rules"]
    assert {"list"} <= set(role["rules"][0]["verbs"])
    binding = docs[("RoleBinding", "rotator-sharding-rolebinding", NS)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "rotator-sharding-role",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rotator-controller-manager", "namespace": NS}
    ]
    # the leader election Role names no Lease, so the shards' names need no rule of their own
    leader = docs[("Role", "rotator-leader-election-role", NS)]
    assert all("resourceNames" not in rule for rule in leader["rules"])
    assert not SHARDING_RBAC & renders["defaults"].by_identity().keys()


def _notes(
    tmp_path: Path, values: dict[str, Any], *, release: str = helm.RELEASE, namespace: str = NS
) -> str:
    """NOTES.txt as `helm install` prints it: ``helm template`` does not render it, so a copy of
    the chart renders it through ``tpl`` in a template of its own."""
    chart = tmp_path / "chart"
    shutil.copytree(helm.CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "files/notes.txt") . | quote }}\n'
    )
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    argv = [str(helm.binary()), "template", release, str(chart), "-n", namespace, "-f"]
    argv += [str(values_file), "--show-only", "templates/zz-notes.yaml"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, env=helm.environment())
    assert out.returncode == 0, out.stderr
    notes: str = yaml.safe_load(out.stdout)["notes"]
    return notes


def test_the_notes_name_the_shards_only_when_there_are_some(tmp_path: Path) -> None:
    assert "shard" not in _notes(tmp_path / "defaults", {})
    notes = _notes(tmp_path / "six", {"sharding": {"shards": 6}, "replicas": 4})
    assert "split into 6 shards" in notes
    assert "rotator-leader-election-shard-<i>-of-6" in notes
    assert "shared among the 4 replicas (1 or 2 each)" in notes
    assert "scale to 0 first" in notes
    one = _notes(tmp_path / "one", {"sharding": {"shards": 6}, "replicas": 1})
    assert "shared among the 1 replica (it holds all 6)" in one


def test_the_notes_give_rotator_status_the_leases_of_a_release_not_at_the_defaults(
    tmp_path: Path,
) -> None:
    """``rotator status`` looks for rotator-leader-election in rotator-system unless told."""
    flags = "--leader-election-namespace ops --leader-election-id ops-rotator-leader-election"
    assert flags in _notes(tmp_path / "ops", {}, release="ops", namespace="ops")
    assert "--leader-election" not in _notes(tmp_path / "defaults", {})
    assert "--leader-election" not in _notes(
        tmp_path / "no-lease", {"leaderElection": {"enabled": False}, "replicas": 1}, release="ops"
    )

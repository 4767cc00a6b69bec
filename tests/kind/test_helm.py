"""rotator installed, tested, upgraded twice and removed with Helm (charts/rotator), on the kind
cluster (issue 22's e2e-kind half):

* ``helm install`` into the restricted namespace rotator-system, every replica Ready;
* ``helm upgrade`` from image A (the earlier commit in hack/kind/upgrade-from, installed by
  today's chart with its image values pointing at A) to this commit's image, and a ``helm
  upgrade`` of values only (replicas, resources, extraArgs): neither mints a valid credential
  again (the stand-ins' STS calls against the new credentials, every derived Secret's versions
  through a watch, the API-key chains' derived Secrets' resourceVersions) nor rewrites an
  unchanged route configuration (the API-key routes' ``rotator-route-*`` Secrets keep their
  resourceVersions; an STS route's config embeds its session, so it is rewritten exactly when a
  due renewal changes it, never with the same config-hash);
* ``helm test`` passes right after the install, and again against this commit's controller
  after the image upgrade;
* ``helm uninstall`` leaves nothing the chart rendered, in any revision or as a test hook,
  except the CRDs it keeps, the controller's leader-election Lease included (the chart renders
  it empty, so that the uninstall deletes it: it renders no Namespace to take it along).

The chains: :data:`API_KEY_CHAINS` API-key chains and :data:`STS_CHAINS` STS chains through the
stand-ins (the ServiceAccount-token flow; 60 s sessions, so renewals that are due happen during
an upgrade and are told apart from credentials minted again). The chart's ``extraEnv`` carries
the stand-ins' plain-http AWS endpoints (:data:`STANDIN_ENV`); their CA and the pod identity
token need a volume, which the chart has no value for, so Azure, OIDC-over-TLS and
controller-identity chains are not part of this module.

The module starts from a cluster without config/default's objects: it asks the suite's
``installation`` fixture to remove what the earlier modules installed (as test_upgrade.py does),
and fails naming any rotator CRD or ClusterRole still there (Helm would refuse to adopt it). It
leaves none behind: the release, the kept CRDs, the controller's Lease, and rotator-system when it
made it.
"""

from __future__ import annotations

import secrets as random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import objects
from tests.kind import install
from tests.kind.chains import (
    api_key_chain,
    policies,
    sts_calls,
    sts_chains,
    wait_all_ready,
)
from tests.kind.cluster import DEPLOYMENTS, Cluster
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.env import KindEnv
from tests.kind.helmrelease import (
    HELM_LABELS,
    KEEP,
    Release,
    labelled,
    leftovers,
    present,
    split_image,
)
from tests.kind.history import POLICY_LABEL, ROUTE_LABEL, Credentials, RouteConfigs
from tests.kind.standins import StandIns
from tests.kind.watching import Recorder
from tests.support import leaks, required
from tests.support.polling import wait_for

NAMESPACE = install.NAMESPACE
RESTRICTED = "pod-security.kubernetes.io/enforce"
API_KEY_CHAINS = 5
STS_CHAINS = 5
API_KEY_PREFIX = "key"
STANDIN_ENV = (
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_IAM",
    "AWS_EC2_METADATA_DISABLED",
    "ROTATOR_GCP_STS_ENDPOINT",
    "ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT",
)
"""The stand-ins' variables that need no file (plain-http endpoints): what ``extraEnv`` can
carry. The rest (``REQUESTS_CA_BUNDLE``, the pod identity token file) name files of a Secret
volume the chart cannot mount."""
BOUNDARY = 2
"""STS exchanges that may fall on the other side of a window's ends from the write they led to."""
VALUES_ONLY: dict[str, Any] = {
    "replicas": 3,
    "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "384Mi"}},
    "extraArgs": ["--workers=6"],
}
"""The values-only upgrade: one more replica, other resources, one more flag."""
LEASE = objects.Resource("coordination.k8s.io", "v1", "leases", "Lease")


@dataclass
class Helmed:
    release: Release
    chains: str
    """The chains' namespace."""
    base: dict[str, Any]
    """Values every revision has (the stand-ins' endpoints)."""
    api_keys: list[str] = field(default_factory=list)
    """The API keys the chains serve (never printed; the leak scan looks for them)."""
    image: str = ""
    """The image installed first (A when given, else this commit's)."""


def values(base: dict[str, Any], image: str, **more: Any) -> dict[str, Any]:
    repository, tag = split_image(image)
    return {**base, "image": {"repository": repository, "tag": tag}, **more}


def ensure_restricted_namespace(cluster: Cluster) -> bool:
    """rotator-system with the restricted Pod Security label (the chart renders no Namespace);
    True when this made it."""
    made = cluster.get(objects.NAMESPACES, NAMESPACE) is None
    cluster.create_namespace(NAMESPACE, {RESTRICTED: "restricted"})
    cluster.kubectl("label", "namespace", NAMESPACE, f"{RESTRICTED}=restricted", "--overwrite")
    return made


def wait_rolled_out(cluster: Cluster, timeout: float = 300) -> list[dict[str, Any]]:
    return wait_for(
        lambda: install.rolled_out(cluster),
        timeout=timeout,
        interval=0.2,
        what=f"deployment {install.DEPLOYMENT} rolled out, every replica Ready",
    )


@pytest.fixture(scope="module")
def helmed(
    kind_env: KindEnv,
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    standins: StandIns,
    namespaces: Callable[[str], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Helmed]:
    installation.remove()  # the earlier modules' config/default, with its namespace
    left = leftovers(cluster)
    if left:
        pytest.fail(
            f"config/default's objects are in the cluster; Helm would not adopt them: {left}"
        )
    made_namespace = ensure_restricted_namespace(cluster)
    release = Release(cluster, NAMESPACE, tmp_path_factory.mktemp("helm"))
    env = [{"name": k, "value": standins.env[k]} for k in STANDIN_ENV if k in standins.env]
    helmed = Helmed(release, namespaces("helm"), {"extraEnv": env})
    try:
        yield helmed
    finally:
        if release.deployed():
            release.uninstall()
        crds = sorted(r.name for r in release.rendered if r.kind == "CustomResourceDefinition")
        if crds:
            cluster.kubectl(
                "delete", "crd", *crds, "--ignore-not-found", "--timeout=120s", timeout=180
            )
        cluster.kubectl("delete", "lease", install.LEASE, "-n", NAMESPACE, "--ignore-not-found")
        if made_namespace:
            cluster.delete_namespace(NAMESPACE)
        scanner = leaks.Scanner(
            {"the stand-ins": standins.issued(), "the chains' API keys": helmed.api_keys}
        )
        found = [
            f"{name}: {leak}"
            for name, text in controller_logs.all_text().items()
            for leak in scanner.leaks({"log": text})
        ]
        assert not found, found


@dataclass(frozen=True)
class Installed:
    seconds_to_ready: float
    seconds_chains_ready: float


@pytest.fixture(scope="module")
def installed(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    controller_logs: ControllerLogs,
    standins: StandIns,
) -> Installed:
    """``helm install`` at image A (this commit's when A is not given), then the chains."""
    helmed.image = kind_env.image_a or kind_env.image
    started = time.monotonic()
    helmed.release.install(values(helmed.base, helmed.image))
    wait_rolled_out(cluster)
    seconds = time.monotonic() - started
    controller_logs.follow()

    docs = sts_chains(helmed.chains, STS_CHAINS)
    standins.register(policies(docs), [])
    for i in range(API_KEY_CHAINS):
        key = random.token_urlsafe(24)
        helmed.api_keys.append(key)
        docs += api_key_chain(helmed.chains, f"{API_KEY_PREFIX}-{i:03d}", key)
    started = time.monotonic()
    cluster.apply(docs)
    wait_all_ready(cluster, helmed.chains, timeout=180, what="the chains Ready")
    return Installed(seconds, time.monotonic() - started)


@dataclass(frozen=True)
class Transition:
    """What one ``helm upgrade`` did to the chains."""

    seconds_to_rolled_out: float
    seconds_observed: float
    sts_calls: int
    new_credentials: int
    minted_again: list[str]
    derived_unchanged_rewrites: list[str]
    api_key_secrets_rewritten: list[str]
    api_key_secrets: int
    route_configs_rewritten: list[str]
    """API-key routes (their config holds a key that never changes) whose Secret's
    resourceVersion moved."""
    route_configs: int
    route_config_writes: int
    """Every route config write, the STS routes' too: their config embeds the session, so a
    due renewal rewrites it with a new config-hash."""
    route_config_unchanged_rewrites: list[str]
    """Writes of any route config that kept its config-hash."""
    relists: int


def managed_versions(cluster: Cluster, namespace: str) -> dict[str, tuple[str, dict[str, str]]]:
    """rotator's Secrets in a namespace: name → (resourceVersion, labels)."""
    found = {}
    for item in cluster.items(
        objects.SECRETS, namespace=namespace, label_selector=rapi.MANAGED_SELECTOR
    ):
        md = item["metadata"]
        found[md["name"]] = (str(md["resourceVersion"]), dict(md.get("labels") or {}))
    return found


def upgrade(
    cluster: Cluster,
    helmed: Helmed,
    standins: StandIns,
    controller_logs: ControllerLogs,
    new_values: dict[str, Any],
) -> Transition:
    """``helm upgrade`` to ``new_values`` while a watch records the chains' Secrets, until the
    new Pods run and every STS policy has been renewed once by them (a renewal that was due: by
    then the new leader has reconciled every object, which is when a needless mint or rewrite
    would have happened)."""
    before = managed_versions(cluster, helmed.chains)
    with Recorder(
        cluster.api, objects.SECRETS, namespace=helmed.chains, label_selector=rapi.MANAGED_SELECTOR
    ) as watched:
        since, calls_before = time.time(), sts_calls(standins.calls())
        started = time.monotonic()
        helmed.release.upgrade(new_values)
        wait_rolled_out(cluster)
        rolled_wall, seconds = time.time(), time.monotonic() - started
        controller_logs.follow()

        def renewed_by_the_new_pods() -> bool:
            fresh = Credentials(watched.events()).new_credentials(since=rolled_wall)
            return len({c.secret for c in fresh}) >= STS_CHAINS

        wait_for(
            renewed_by_the_new_pods, timeout=120, interval=0.5, what="every STS policy renewed"
        )
        until, calls = time.time(), sts_calls(standins.calls()) - calls_before
        events, relists = watched.events(), watched.relists
    after = managed_versions(cluster, helmed.chains)
    credentials, configs = Credentials(events), RouteConfigs(events)

    def policy_of(labels: dict[str, str]) -> str:
        return labels.get(POLICY_LABEL, "")

    api_key = [
        n for n, (_, labels) in before.items() if policy_of(labels).startswith(API_KEY_PREFIX)
    ]
    routes = [
        n
        for n, (_, labels) in before.items()
        if labels.get(ROUTE_LABEL, "").startswith(API_KEY_PREFIX)
    ]
    return Transition(
        seconds_to_rolled_out=seconds,
        seconds_observed=until - since,
        sts_calls=calls,
        new_credentials=len(credentials.new_credentials(since=since)),
        minted_again=[c.secret for c in credentials.minted_again(since=since)],
        derived_unchanged_rewrites=credentials.unchanged_rewrites(since=since),
        api_key_secrets_rewritten=[n for n in api_key if after.get(n, ("",))[0] != before[n][0]],
        api_key_secrets=len(api_key),
        route_configs_rewritten=[n for n in routes if after.get(n, ("",))[0] != before[n][0]],
        route_configs=len(routes),
        route_config_writes=configs.writes(since=since),
        route_config_unchanged_rewrites=configs.unchanged_rewrites(since=since),
        relists=relists,
    )


def report(figure: Callable[..., None], name: str, what: Transition, **more: Any) -> None:
    figure(
        name,
        **more,
        seconds_upgrade_to_rolled_out=what.seconds_to_rolled_out,
        seconds_observed=what.seconds_observed,
        sts_calls=what.sts_calls,
        new_credentials=what.new_credentials,
        minted_again=len(what.minted_again),
        derived_unchanged_rewrites=len(what.derived_unchanged_rewrites),
        api_key_derived_rv_changed=f"{len(what.api_key_secrets_rewritten)}/{what.api_key_secrets}",
        api_key_route_config_rv_changed=f"{len(what.route_configs_rewritten)}/{what.route_configs}",
        route_config_writes=what.route_config_writes,
        route_config_unchanged_rewrites=len(what.route_config_unchanged_rewrites),
        relists=what.relists,
    )


def check(what: Transition) -> None:
    assert what.api_key_secrets == API_KEY_CHAINS, "every API-key chain's derived Secret was seen"
    assert what.route_configs == API_KEY_CHAINS, "every API-key route's config was seen"
    assert not what.minted_again, f"credentials minted again before due: {what.minted_again}"
    assert abs(what.sts_calls - what.new_credentials) <= BOUNDARY, (
        f"{what.sts_calls} STS exchanges for {what.new_credentials} new credentials"
    )
    assert not what.derived_unchanged_rewrites, (
        f"derived Secrets rewritten with the same credential: {what.derived_unchanged_rewrites}"
    )
    assert not what.api_key_secrets_rewritten, (
        f"API-key derived Secrets written again: {what.api_key_secrets_rewritten}"
    )
    assert not what.route_configs_rewritten, (
        f"API-key route configs written again: {what.route_configs_rewritten}"
    )
    assert not what.route_config_unchanged_rewrites, (
        f"route configs rewritten with the same config: {what.route_config_unchanged_rewrites}"
    )
    assert what.route_config_writes <= what.new_credentials + BOUNDARY, (
        f"{what.route_config_writes} route config writes for {what.new_credentials} renewals"
    )


@pytest.fixture(scope="module")
def image_upgraded(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    installed: Installed,
    standins: StandIns,
    controller_logs: ControllerLogs,
) -> Transition | None:
    """``helm upgrade`` from image A to this commit's (None when A was not given)."""
    if helmed.image == kind_env.image:
        return None
    return upgrade(cluster, helmed, standins, controller_logs, values(helmed.base, kind_env.image))


def test_helm_install_into_the_restricted_namespace_brings_every_replica_ready(
    kind_env: KindEnv, cluster: Cluster, helmed: Helmed, installed: Installed, figure: Any
) -> None:
    figure(
        "helm_install",
        image=helmed.image,
        seconds_install_to_ready=installed.seconds_to_ready,
        chains=API_KEY_CHAINS + STS_CHAINS,
        seconds_chains_ready=installed.seconds_chains_ready,
    )
    pods = install.rolled_out(cluster) or []
    assert len(pods) == 2, "the chart's default: two replicas"
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert images == {helmed.image}
    assert helmed.release.revision() == 1


def test_helm_test_passes_right_after_helm_install(
    helmed: Helmed, installed: Installed, figure: Any
) -> None:
    """``helm install``, then ``helm test`` (against the image installed first: A, when given)."""
    started = time.monotonic()
    out = helmed.release.test()
    figure("helm_test_after_install", image=helmed.image, seconds=time.monotonic() - started)
    assert "Succeeded" in out, out


def test_helm_upgrade_from_image_a_mints_nothing_again_and_rewrites_no_route_config(
    kind_env: KindEnv,
    cluster: Cluster,
    image_upgraded: Transition | None,
    figure: Any,
) -> None:
    if image_upgraded is None:
        required.missing("no image A: ROTATOR_KIND_IMAGE_A is not set")
    report(
        figure,
        "helm_upgrade_image",
        image_upgraded,
        image_a_commit=kind_env.image_a_commit or "?",
    )
    pods = install.rolled_out(cluster) or []
    assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {kind_env.image}
    check(image_upgraded)


def test_helm_test_passes_against_this_commits_controller(
    kind_env: KindEnv,
    helmed: Helmed,
    image_upgraded: Transition | None,
    figure: Any,
) -> None:
    started = time.monotonic()
    out = helmed.release.test()
    figure("helm_test_after_upgrade", image=kind_env.image, seconds=time.monotonic() - started)
    assert "Succeeded" in out, out


def test_helm_upgrade_of_values_only_mints_nothing_again_and_rewrites_no_route_config(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    image_upgraded: Transition | None,
    standins: StandIns,
    controller_logs: ControllerLogs,
    figure: Any,
) -> None:
    what = upgrade(
        cluster,
        helmed,
        standins,
        controller_logs,
        values(helmed.base, kind_env.image, **VALUES_ONLY),
    )
    report(figure, "helm_upgrade_values", what, replicas=VALUES_ONLY["replicas"])
    deployment = cluster.get(DEPLOYMENTS, install.DEPLOYMENT, NAMESPACE) or {}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == VALUES_ONLY["replicas"]
    assert container["resources"]["requests"] == VALUES_ONLY["resources"]["requests"]
    assert "--workers=6" in container["args"]
    assert container["image"] == kind_env.image
    check(what)


def test_helm_uninstall_leaves_nothing_but_the_kept_crds(
    cluster: Cluster, helmed: Helmed, figure: Any
) -> None:
    # the chains go first, while the controller runs (a policy's finalizer may need it)
    cluster.delete_namespace(helmed.chains)
    rendered = set(helmed.release.rendered)
    assert rendered, "the release rendered objects"
    started = time.monotonic()
    helmed.release.uninstall()
    wait_for(
        lambda: not install.controller_pods(cluster),
        timeout=120,
        interval=0.5,
        what="the controller's Pods gone",
    )
    seconds = time.monotonic() - started

    left = present(cluster, rendered)
    crds = {r for r in rendered if r.kind == "CustomResourceDefinition"}
    others = sorted(str(r) for r in left if r not in crds)
    kinds = {r.resource for r in rendered} | {"ReplicaSet.v1.apps", "Pod"}
    swept = [n for n in labelled(cluster, kinds) if not n.startswith("customresourcedefinition")]
    release_secrets = cluster.items(
        objects.SECRETS, namespace=NAMESPACE, label_selector="owner=helm,name=rotator"
    )
    lease = cluster.get(LEASE, install.LEASE, NAMESPACE)
    figure(
        "helm_uninstall",
        seconds_to_gone=seconds,
        rendered_objects=len(rendered),
        kinds=",".join(sorted({r.kind for r in rendered})),
        left_rendered=len(others),
        left_labelled=len(swept),
        crds_kept=f"{len(set(left) & crds)}/{len(crds)}",
        controller_lease_left=lease is not None,
    )
    assert not others, f"objects the chart rendered are still there: {others}"
    assert not swept, f"objects with the release's labels ({HELM_LABELS}) are left: {swept}"
    assert not release_secrets, "Helm's release Secrets are gone"
    assert set(left) >= crds, f"kept CRDs missing: {sorted(str(r) for r in crds - set(left))}"
    for ref in crds:
        annotations = left[ref].get("annotations") or {}
        assert annotations.get(KEEP) == "keep", f"{ref} carries {KEEP}: keep"
    assert lease is None, f"the leader-election Lease {NAMESPACE}/{install.LEASE} is left"

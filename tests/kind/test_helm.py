"""rotator installed, tested, upgraded and removed with Helm (charts/rotator), on the kind cluster
(issue 22's e2e-kind half; issue 34's shards):

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
* back on image A (one leader, the earlier commit, which has no shards), the rolling upgrade to
  this commit's image with 3 replicas and 6 shards (``sharding.shards``): the same zeros, no shard
  Lease taken before the single leader's Lease was released, and no object reconciled by two
  replicas at once (every Pod's reconcile log lines, image A's too, while a policy per shard is
  kept busy); then every chain Ready and new ones made Ready, each reconciled only by the replica
  that holds its shard, two shards each;
* a sharded replica's Pod deleted: its two shards held again within the Lease duration plus a
  retry, nothing minted again or rewritten, no object reconciled by two replicas at once;
* a change of N (``sharding.shards`` 6 → 4): the replicas with 6 share their shards among
  themselves as the rolling update stops them, so every shard of 6 is last released by the last
  of them, and no shard of 4 is taken until the lease duration after; then the way back to one
  leader (``sharding.shards: 1``): Helm deletes the sharding Role at once, the sharded replicas
  still running take each stopped one's shards (by name), and the single leader takes its Lease
  the lease duration after the last release; in both, no credential expires, the same zeros, no
  overlap;
* ``helm uninstall`` leaves nothing the chart rendered, in any revision or as a test hook,
  except the CRDs it keeps, the controller's leader-election Lease included (the chart renders
  it empty, so that the uninstall deletes it: it renders no Namespace to take it along);
* then a fresh ``helm install`` with 3 replicas and 6 shards, as a user starts sharded: two
  shards each, the sharded PodDisruptionBudget, ``helm test``, and new chains in every shard
  Ready, each object reconciled by its shard's holder only.

The chains: an API-key chain and an STS chain in each of :data:`SHARDS` namespaces, one in each
shard (so that every sharded replica serves some), through the stand-ins (the ServiceAccount-token
flow; 60 s sessions, so renewals that are due happen during an upgrade and are told apart from
credentials minted again). The chart's ``extraEnv`` carries the stand-ins' plain-http AWS
endpoints (:data:`STANDIN_ENV`) in every revision; the fresh sharded install adds their CA and
the pod identity token (``extraVolumes``, ``extraVolumeMounts``) and config/samples, all of
them (Azure, OIDC over TLS and the controller's own identity among them).

The module starts from a cluster without config/default's objects: it asks the suite's
``installation`` fixture to remove what the earlier modules installed (as test_upgrade.py does),
and fails naming any rotator CRD or ClusterRole still there (Helm would refuse to adopt it). It
leaves none behind: the release, the kept CRDs, the controller's Leases (the shards' ones stay
after ``helm uninstall``, as docs/operations.md says), and rotator-system when it made it.
"""

from __future__ import annotations

import itertools
import secrets as random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import objects, sharding
from controllers.runtime.shards import shard_lease_name
from tests.kind import install
from tests.kind.chains import (
    api_key_chain,
    policies,
    sample_documents,
    sts_calls,
    sts_chains,
    wait_all_ready,
)
from tests.kind.cluster import DEPLOYMENTS, Cluster
from tests.kind.conftest import SAMPLES_NAMESPACE
from tests.kind.controllerlogs import ControllerLogs, pod_of_file
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
from tests.kind.history import (
    BOUNDARY,
    POLICY_LABEL,
    ROUTE_LABEL,
    Credentials,
    RouteConfigs,
    balanced_end,
)
from tests.kind.standins import StandIns
from tests.kind.watching import Recorder, Seen
from tests.support import leaks, required
from tests.support.churn import Churn
from tests.support.polling import wait_for
from tests.support.reconcilelog import (
    Reconcile,
    entries,
    logged_at,
    object_overlaps,
    reconciles,
)

NAMESPACE = install.NAMESPACE
RESTRICTED = "pod-security.kubernetes.io/enforce"
SHARDS = 6
SHARDED_REPLICAS = 3
API_KEY_CHAINS = SHARDS
STS_CHAINS = SHARDS
"""One of each in every chain namespace: one namespace per shard."""
API_KEY_PREFIX = "key"
STS_PREFIX = "sts"
STANDIN_ENV = (
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_IAM",
    "AWS_EC2_METADATA_DISABLED",
    "ROTATOR_GCP_STS_ENDPOINT",
    "ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT",
)
"""The stand-ins' variables that need no file (plain-http endpoints): what ``extraEnv`` carries
in every revision (image A's too). The rest (``REQUESTS_CA_BUNDLE``, the pod identity token
file) name files of the stand-ins' Secret, which only the fresh sharded install mounts."""
DEBUG: dict[str, Any] = {"logLevel": "debug"}
"""In every revision: each reconcile's log lines, which the overlap checks read (image A's too)."""
VALUES_ONLY: dict[str, Any] = {
    "replicas": 3,
    "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "384Mi"}},
    "extraArgs": ["--workers=6"],
}
"""The values-only upgrade: one more replica, other resources, one more flag."""
SHARDED: dict[str, Any] = {"replicas": SHARDED_REPLICAS, "sharding": {"shards": SHARDS}}
OTHER_SHARDS = 4
"""The change of N: from :data:`SHARDS` to this many (2, 1 and 1 for the three replicas)."""
"""The sharded upgrade's values: 2 shards a replica."""
LEASE = objects.Resource("coordination.k8s.io", "v1", "leases", "Lease")
LEASE_DURATION, RETRY_PERIOD = 15.0, 2.0
"""The chart's (controller-runtime's defaults): each shard's Lease has the single leader's."""
RETRY_JITTER = 1.2
"""A retry comes after retry_period * (1 + U(0, 1.2)) at most (the leader elector's, the
widest; the shard coordinator's rounds are retry_period * U(1, 1.2))."""
GRACE_PERIOD = 40.0
"""The chart's terminationGracePeriodSeconds."""


@dataclass
class Helmed:
    release: Release
    namespaces: list[str]
    """The chains' namespaces, the i-th in shard i of :data:`SHARDS`."""
    base: dict[str, Any]
    """Values every revision has (the stand-ins' endpoints)."""
    api_keys: list[str] = field(default_factory=list)
    """The API keys the chains serve (never printed; the leak scan looks for them)."""
    image: str = ""
    """The image installed first (A when given, else this commit's)."""


def values(base: dict[str, Any], image: str, **more: Any) -> dict[str, Any]:
    repository, tag = split_image(image)
    return {**base, "image": {"repository": repository, "tag": tag}, **more}


def one_namespace_per_shard(shards: int) -> list[str]:
    """Names ``kind-helm-<hex>-<n>``, the i-th in shard i (FNV-1a of the name, as the controller
    and the API server shard), so that chains in them spread over every shard."""
    token = uuid.uuid4().hex[:6]
    found: dict[int, str] = {}
    for n in itertools.count():
        name = f"kind-helm-{token}-{n}"
        found.setdefault(sharding.shard_of(name, shards), name)
        if len(found) == shards:
            return [found[i] for i in range(shards)]
    raise AssertionError("unreachable")


def chain_docs(namespaces: list[str], keys: list[str], *, suffix: str = "") -> list[dict[str, Any]]:
    """An STS chain and an API-key chain in each namespace, named after its index (unique across
    namespaces: the recorded Secrets are told apart by name); ``keys`` gets the API keys."""
    docs: list[dict[str, Any]] = []
    for i, namespace in enumerate(namespaces):
        docs += sts_chains(namespace, 1, prefix=f"{STS_PREFIX}{suffix}-{i}")
        key = random.token_urlsafe(24)
        keys.append(key)
        docs += api_key_chain(namespace, f"{API_KEY_PREFIX}{suffix}-{i}", key)
    return docs


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
    helmed = Helmed(release, one_namespace_per_shard(SHARDS), {"extraEnv": env, **DEBUG})
    for name in helmed.namespaces:
        cluster.create_namespace(name)
    try:
        yield helmed
    finally:
        # the chains go first, while the controller runs (a policy's finalizer may need it)
        cluster.delete_namespace(*helmed.namespaces)
        if release.deployed():
            release.uninstall()
        crds = sorted(r.name for r in release.rendered if r.kind == "CustomResourceDefinition")
        if crds:
            cluster.kubectl(
                "delete", "crd", *crds, "--ignore-not-found", "--timeout=120s", timeout=180
            )
        cluster.kubectl("delete", "lease", install.LEASE, "-n", NAMESPACE, "--ignore-not-found")
        if shard_leases := sharded_leases(cluster):
            cluster.kubectl("delete", "lease", *shard_leases, "-n", NAMESPACE)
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

    docs = chain_docs(helmed.namespaces, helmed.api_keys)
    standins.register(policies(docs), [])
    started = time.monotonic()
    cluster.apply(docs)
    wait_all_ready(cluster, *helmed.namespaces, timeout=180, what="the chains Ready")
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
    expired: dict[str, float]
    """Derived Secret → seconds it held an expired credential while observed."""


def managed_versions(
    cluster: Cluster, namespaces: list[str]
) -> dict[str, tuple[str, dict[str, str]]]:
    """rotator's Secrets in the chains' namespaces: name → (resourceVersion, labels)."""
    found = {}
    for namespace in namespaces:
        for item in cluster.items(
            objects.SECRETS, namespace=namespace, label_selector=rapi.MANAGED_SELECTOR
        ):
            md = item["metadata"]
            found[md["name"]] = (str(md["resourceVersion"]), dict(md.get("labels") or {}))
    return found


def chain_secrets(cluster: Cluster) -> Recorder:
    """A recorder of rotator's Secrets in every namespace (one watch for the chains' several;
    :func:`in_namespaces` keeps theirs: ``helm test``'s chain is in the release namespace)."""
    return Recorder(cluster.api, objects.SECRETS, label_selector=rapi.MANAGED_SELECTOR)


def in_namespaces(events: list[Seen], namespaces: list[str]) -> list[Seen]:
    return [e for e in events if e.obj["metadata"].get("namespace") in namespaces]


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
    would have happened), and on to the first moment the STS exchanges and the new credentials
    balance (:func:`~tests.kind.history.balanced_end`: a wave of renewals in flight then)."""
    before = managed_versions(cluster, helmed.namespaces)
    with chain_secrets(cluster) as watched:
        since, calls_before = time.time(), sts_calls(standins.calls())
        started = time.monotonic()
        helmed.release.upgrade(new_values)
        wait_rolled_out(cluster)
        rolled_wall, seconds = time.time(), time.monotonic() - started
        controller_logs.follow()

        def renewed_by_the_new_pods() -> bool:
            events = in_namespaces(watched.events(), helmed.namespaces)
            fresh = Credentials(events).new_credentials(since=rolled_wall)
            return len({c.secret for c in fresh}) >= STS_CHAINS

        wait_for(
            renewed_by_the_new_pods, timeout=120, interval=0.5, what="every STS policy renewed"
        )
        end = balanced_end(
            lambda: sts_calls(standins.calls()) - calls_before,
            lambda: in_namespaces(watched.events(), helmed.namespaces),
            since=since,
        )
        until, calls, events, relists = end.at, end.calls, end.events, watched.relists
    after = managed_versions(cluster, helmed.namespaces)
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
        expired=credentials.expired_seconds(since=since, until=until),
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
        expired_seconds=sum(what.expired.values()),
    )


def check(what: Transition, api_key_chains: int = API_KEY_CHAINS) -> None:
    """The zeros of an upgrade, over ``api_key_chains`` API-key chains (the first ones, and those
    the sharded tests added)."""
    assert what.api_key_secrets == api_key_chains, "every API-key chain's derived Secret was seen"
    assert what.route_configs == api_key_chains, "every API-key route's config was seen"
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


def shard_lease(index: int, shards: int = SHARDS) -> str:
    return shard_lease_name(install.LEASE, index, shards)


def sharded_leases(cluster: Cluster) -> list[str]:
    """The names of the shards' and the replicas' membership Leases in the release namespace."""
    prefixes = (f"{install.LEASE}-shard-", f"{install.LEASE}-member-")
    names = (str(lease["metadata"]["name"]) for lease in cluster.items(LEASE, namespace=NAMESPACE))
    return sorted(n for n in names if n.startswith(prefixes))


def holder_of(lease: dict[str, Any]) -> str:
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def pod_of(identity: str) -> str:
    """The Pod of a replica's identity (``<hostname>_<8 hex>``; the host name is the Pod's)."""
    return identity.rsplit("_", 1)[0] if identity else ""


def shard_holders(cluster: Cluster, shards: int = SHARDS) -> dict[int, str]:
    """Shard → the identity holding its Lease ('' when released or not made yet)."""
    leases = {
        lease["metadata"]["name"]: lease for lease in cluster.items(LEASE, namespace=NAMESPACE)
    }
    return {i: holder_of(leases.get(shard_lease(i, shards)) or {}) for i in range(shards)}


def settled(cluster: Cluster, shards: int = SHARDS) -> dict[int, str] | None:
    """Shard → its holder's Pod, once every controller Pod is Ready and the ``shards`` shards
    are held by them, a fair share each (counts that differ by at most one); else None."""
    pods = install.rolled_out(cluster)
    if not pods:
        return None
    names = {p["metadata"]["name"] for p in pods}
    holders = {i: pod_of(identity) for i, identity in shard_holders(cluster, shards).items()}
    share = Counter(holders.values())
    if set(share) != names or max(share.values()) - min(share.values()) > 1:
        return None
    return holders


def wait_settled(cluster: Cluster, timeout: float = 120, shards: int = SHARDS) -> dict[int, str]:
    return wait_for(
        lambda: settled(cluster, shards),
        timeout=timeout,
        interval=0.5,
        what=f"every one of {shards} shards held, a fair share by each replica",
    )


def busy(namespaces: list[str], among: list[str] | None = None) -> list[tuple[str, str]]:
    """The first API-key policy (:func:`chain_docs`) of each of ``among`` (default: all of
    ``namespaces``, the chains' namespaces): what :class:`Churn` keeps busy."""
    return [
        (ns, f"{API_KEY_PREFIX}-{i}")
        for i, ns in enumerate(namespaces)
        if among is None or ns in among
    ]


def coordination(logs: ControllerLogs, since: float, until: float) -> str:
    """The replicas' shard and Lease decisions between ``since`` and ``until`` (``shards.*``,
    ``leader.*``, the stop request), a line each, seconds from ``since``, in time order: what a
    failed handover bound is read from."""
    lines = sorted(
        (at, pod_of_file(name), str(e.get("event")), str(e.get("shard", e.get("lease", ""))))
        for name, text in logs.all_text().items()
        for at, e in entries(text)
        if since <= at <= until
        and str(e.get("event")).startswith(("shards.", "leader.", "rotator.stop"))
    )
    return "\n".join(f"{at - since:7.2f} {pod} {event} {what}" for at, pod, event, what in lines)


def replica_reconciles(logs: ControllerLogs, namespaces: list[str]) -> dict[str, list[Reconcile]]:
    """Each controller container incarnation followed this session (its log file's name) → its
    reconciles of objects in ``namespaces``; one without an end line ran until its log's last
    line when the container has ended, else until now."""
    now, ended = time.time(), logs.ended_files()
    out: dict[str, list[Reconcile]] = {}
    for name, text in logs.all_text().items():
        ended_at = max((at for at, _ in entries(text)), default=now) if name in ended else now
        out[name] = [r for r in reconciles(text, ended_at=ended_at) if r.namespace in namespaces]
    return out


def check_no_object_overlap(
    logs: ControllerLogs,
    namespaces: list[str],
    figure: Callable[..., None],
    what: str,
    *,
    since: float,
) -> dict[str, list[Reconcile]]:
    """No object of the chains was reconciled by two containers at once after ``since``, in
    every controller container's log of the session (image A's single leaders, the sharded
    replicas, a deleted Pod's)."""
    by_replica = {
        name: [r for r in done if r.end >= since]
        for name, done in replica_reconciles(logs, namespaces).items()
    }
    overlaps = object_overlaps(by_replica)
    figure(
        f"{what}_overlap",
        containers_reconciling=sum(1 for done in by_replica.values() if done),
        reconciles=sum(len(done) for done in by_replica.values()),
        objects=len({r.object for done in by_replica.values() for r in done}),
        overlaps=len(overlaps),
        longest_overlap_seconds=overlaps[0].seconds if overlaps else 0.0,
    )
    assert not overlaps, f"objects reconciled by two replicas at once: {overlaps[:5]}"
    return by_replica


@dataclass(frozen=True)
class Served:
    """Chains applied to a sharded release, and which replicas reconciled their objects."""

    made: set[str]
    """The chains' rotator objects (``Reconcile.object``: a controller is named after its kind)."""
    by: dict[str, set[str]]
    """Each of :attr:`made` reconciled since the apply → the Pods that did."""
    holders: dict[int, str]
    chains: int
    seconds_ready: float

    def check(self) -> None:
        """Each object reconciled, and by the replica holding its namespace's shard only."""
        wrong = {
            obj: pods
            for obj, pods in self.by.items()
            if pods != {self.holders[sharding.shard_of(obj.split(":", 1)[1].split("/")[0], SHARDS)]}
        }
        never = sorted(self.made - set(self.by))
        assert not never, f"objects never reconciled: {never}"
        assert not wrong, f"reconciled by other replicas than their shard's holder: {wrong}"


def serve_chains(
    cluster: Cluster,
    helmed: Helmed,
    standins: StandIns,
    controller_logs: ControllerLogs,
    holders: dict[int, str],
    namespaces: list[str],
    *,
    suffix: str,
) -> Served:
    """An API-key and an STS chain in each of ``namespaces`` (one per shard), applied and waited
    Ready; then who reconciled them, from every controller container's log."""
    docs = chain_docs(namespaces, helmed.api_keys, suffix=suffix)
    standins.register(policies(docs), [])
    made = {
        f"{d['kind'].lower()}:{d['metadata']['namespace']}/{d['metadata']['name']}"
        for d in docs
        if d["apiVersion"].startswith(rapi.GROUP)
    }
    since, started = time.time(), time.monotonic()
    cluster.apply(docs)
    wait_all_ready(cluster, *namespaces, timeout=120, what=f"the chains{suffix} Ready")
    seconds = time.monotonic() - started
    by: dict[str, set[str]] = {}
    for name, done in replica_reconciles(controller_logs, namespaces).items():
        for r in done:
            if r.start >= since and r.object in made:
                by.setdefault(r.object, set()).add(pod_of_file(name))
    return Served(made, by, holders, len(policies(docs)), seconds)


def filtering_modes(controller_logs: ControllerLogs, pod: str) -> list[str]:
    """The filtering modes a Pod's containers logged (``shards.filtering``: once per start)."""
    return [
        str(e.get("mode"))
        for _, e in entries(controller_logs.text(pod))
        if e.get("event") == "shards.filtering"
    ]


@dataclass(frozen=True)
class Sharded:
    back: Transition | None
    """Back on image A, one leader, before the sharded upgrade (None without image A)."""
    upgrade: Transition
    since: float
    """Wall-clock seconds when the way back to image A began."""
    started: float
    """Wall-clock seconds when the sharded upgrade began."""
    leases: list[Seen]
    """Every version of the release namespace's Leases during it, in the API server's order."""
    lease_relists: int
    """How often that watch had to list again (and may have missed versions)."""
    new_pods: set[str]
    a_pods: set[str]
    """Image A's Pods the sharded upgrade replaced (empty without image A)."""


@pytest.fixture(scope="module")
def sharded(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    installed: Installed,
    standins: StandIns,
    controller_logs: ControllerLogs,
) -> Sharded:
    """Back on image A (one leader, :data:`SHARDED_REPLICAS` replicas; the earlier revisions ran
    this commit's), then ``helm upgrade`` to this commit's image with :data:`SHARDED`, while a
    policy in every shard is kept busy, until the shards have settled."""
    back, since, a_pods = None, time.time(), set()
    if kind_env.image_a:
        to_a = values(helmed.base, kind_env.image_a, replicas=SHARDED_REPLICAS)
        back = upgrade(cluster, helmed, standins, controller_logs, to_a)
        a_pods = {p["metadata"]["name"] for p in wait_rolled_out(cluster)}
    sharded_values = values(helmed.base, kind_env.image, **SHARDED)
    with (
        Recorder(cluster.api, LEASE, namespace=NAMESPACE) as leases,
        Churn(cluster.api, busy(helmed.namespaces), every=0.3),
    ):
        started = time.time()
        what = upgrade(cluster, helmed, standins, controller_logs, sharded_values)
        wait_settled(cluster)
        events, relists = leases.events(), leases.relists
    new_pods = {p["metadata"]["name"] for p in wait_rolled_out(cluster)}
    return Sharded(back, what, since, started, events, relists, new_pods, a_pods)


def test_helm_upgrade_from_one_leader_to_six_shards_mints_nothing_again_and_never_overlaps(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    sharded: Sharded,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """The rolling upgrade from one leader (image A: no shards; three replicas, one leading) to
    three sharded replicas. The new replicas run beside image A's until the Deployment
    controller has replaced them all, and as image A's leader stops another of its replicas
    takes the single leader's Lease over; no shard Lease gets a holder until the last one
    released it and it stood still for the lease duration (the Leases' versions, in the API
    server's order), and from every Pod's reconciles no object was reconciled by an old leader
    and a shard holder at once. Then the same zeros as the other upgrades.

    Break: shard holders that start on a released single-leader Lease at once (as first built)
    took shards between image A's leader's stop and its next replica's election, and held them
    beside that old leader for 1.2 s: an STS credential of one of those shards was minted again
    and two policies' reconciles overlapped."""
    if sharded.back is None:
        required.missing("no image A: ROTATOR_KIND_IMAGE_A is not set")
    # a setup step: a downgrade is not promised to write nothing, so it is shown, not checked
    report(figure, "helm_back_to_image_a", sharded.back, replicas=SHARDED_REPLICAS)
    single = [(n, e) for n, e in enumerate(sharded.leases) if e.name == install.LEASE]
    shards = [
        (n, e)
        for n, e in enumerate(sharded.leases)
        if e.name.startswith(f"{install.LEASE}-shard-") and holder_of(e.obj)
    ]
    assert single, "the single leader's Lease was seen"
    assert shards, "shard Leases were taken"
    last_held = max((n for n, e in single if holder_of(e.obj)), default=-1)
    released = next((e for n, e in single if n > last_held and not holder_of(e.obj)), None)
    first_taken: dict[str, Seen] = {}
    for _, seen in shards:
        first_taken.setdefault(seen.name, seen)
    waited = [
        pod
        for pod in sharded.new_pods
        if logged_at(
            controller_logs.text(pod), "shards.waiting_for_single_leader", after=sharded.started
        )
    ]
    report(
        figure,
        "helm_upgrade_to_shards",
        sharded.upgrade,
        image_a_commit=kind_env.image_a_commit or "?",
        replicas=SHARDED_REPLICAS,
        shards=SHARDS,
        new_pods_that_waited=len(waited),
        seconds_upgrade_to_leader_released=(released.at - sharded.started) if released else -1.0,
        seconds_released_to_every_shard_held=(
            max(s.at for s in first_taken.values()) - released.at if released else -1.0
        ),
    )
    pods = install.rolled_out(cluster) or []
    containers = [c for p in pods for c in p["spec"]["containers"]]
    assert {c["image"] for c in containers} == {kind_env.image}
    assert all(f"--shards={SHARDS}" in c["args"] for c in containers), "the chart's --shards"
    assert min(n for n, _ in shards) > last_held, (
        "a shard Lease was taken while the single leader's Lease had a holder (or before "
        "another old replica took it again)"
    )
    assert released is not None, "the last old leader released the single leader's Lease"
    # released is not gone until it stood still (another old replica may take it): the shards
    # wait the lease duration (less the watch's delivery, at most a retry period late)
    assert min(s.at for s in first_taken.values()) >= released.at + LEASE_DURATION - RETRY_PERIOD
    assert sorted(first_taken) == sorted(shard_lease(i) for i in range(SHARDS))
    assert waited, "the new replicas waited for the old leader (shards.waiting_for_single_leader)"
    assert not sharded.lease_relists, "the Lease watch missed no version (it never listed again)"
    by_container = check_no_object_overlap(
        controller_logs, helmed.namespaces, figure, "helm_upgrade_to_shards", since=sharded.since
    )

    def reconciled_during_the_upgrade(pods: set[str]) -> bool:
        return any(
            r.end >= sharded.started
            for name, done in by_container.items()
            if pod_of_file(name) in pods
            for r in done
        )

    # the overlap check saw both sides of the handover it is about
    assert reconciled_during_the_upgrade(sharded.a_pods), "image A's Pods reconciled meanwhile"
    assert reconciled_during_the_upgrade(sharded.new_pods), "the sharded Pods reconciled"
    check(sharded.upgrade)


def test_three_replicas_with_six_shards_serve_every_chain_each_object_from_its_shards_holder_only(
    cluster: Cluster,
    helmed: Helmed,
    sharded: Sharded,
    standins: StandIns,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """After the upgrade every chain is Ready, two shards each; chains made now (one more of
    each kind in every shard) become Ready, each of their objects reconciled by the replica
    holding its namespace's shard and by no other."""
    holders = wait_settled(cluster)
    wait_all_ready(cluster, *helmed.namespaces, timeout=60, what="the chains Ready, sharded")
    served = serve_chains(
        cluster, helmed, standins, controller_logs, holders, helmed.namespaces, suffix="-new"
    )
    modes = {mode for pod in sharded.new_pods for mode in filtering_modes(controller_logs, pod)}
    figure(
        "shards_serve_new_chains",
        replicas=SHARDED_REPLICAS,
        shards=SHARDS,
        shards_by_replica=",".join(str(n) for n in sorted(Counter(holders.values()).values())),
        chains=served.chains,
        objects=len(served.made),
        seconds_chains_ready=served.seconds_ready,
        objects_reconciled=len(served.by),
        filtering=",".join(sorted(modes)),
    )
    served.check()
    assert settled(cluster) == holders, "no shard moved meanwhile"


def test_deleting_a_sharded_pod_hands_its_shards_over_within_lease_plus_retry_and_never_overlaps(
    cluster: Cluster,
    helmed: Helmed,
    sharded: Sharded,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """A replica's Pod deleted (the kubelet's SIGTERM, as a drain or an eviction does) while the
    policies of its shards are kept busy: each of its shards is held by another replica within
    the Lease duration plus a retry (it drains and releases them; a survivor or the Pod that
    replaces it takes them), the replacement gets its share, the new holders adopt the derived
    Secrets (nothing minted again or rewritten, nothing served expired), and no object was
    reconciled by two replicas at once."""
    holders = wait_settled(cluster)
    victim = holders[0]
    lost = sorted(i for i, pod in holders.items() if pod == victim)
    moved = [ns for ns in helmed.namespaces if sharding.shard_of(ns, SHARDS) in lost]
    bound = LEASE_DURATION + RETRY_PERIOD * (1 + RETRY_JITTER)
    policies_moved = {
        f"backendsecuritypolicy:{p['metadata']['name']}"
        for ns in moved
        for p in cluster.items(rapi.POLICIES, namespace=ns)
    }

    def reconciled(pods: set[str], after: float) -> set[str]:
        """The keys of the moved shards' objects that ``pods`` reconciled to the end since
        ``after``."""
        return {
            r.key
            for name, done in replica_reconciles(controller_logs, moved).items()
            if pod_of_file(name) in pods
            for r in done
            if r.start > after and r.finished
        }

    with (
        chain_secrets(cluster) as secrets,
        Recorder(cluster.api, LEASE, namespace=NAMESPACE) as leases,
        Churn(cluster.api, busy(helmed.namespaces, moved)),
    ):
        since = time.time()
        wait_for(
            lambda: reconciled({victim}, since), timeout=30, what="the Pod works on its shards"
        )
        cluster.kubectl("-n", NAMESPACE, "delete", "pod", victim, "--wait=false")
        deleted = time.time()
        wait_for(
            lambda: all(pod_of(shard_holders(cluster)[i]) not in ("", victim) for i in lost),
            timeout=bound + 5,
            interval=0.1,
            what="the deleted Pod's shards held by others",
        )
        wait_for(lambda: controller_logs.ended(victim), timeout=GRACE_PERIOD + 10, what="its end")
        after = wait_settled(cluster, timeout=180)  # the replacement has its share
        controller_logs.follow()
        # the new holders' first reconcile of each moved policy: where a re-mint would be
        wait_for(
            lambda: reconciled(set(after.values()), deleted) >= policies_moved,
            timeout=60,
            what="every policy of the moved shards reconciled by its new holders",
        )
        until, lease_events = time.time(), leases.events()
        events = in_namespaces(secrets.events(), helmed.namespaces)
        relists = secrets.relists

    def first(index: int, wanted: Callable[[str], bool]) -> float | None:
        return next(
            (
                e.at
                for e in lease_events
                if e.name == shard_lease(index) and e.at >= deleted and wanted(holder_of(e.obj))
            ),
            None,
        )

    taken = {i: first(i, lambda h: pod_of(h) not in ("", victim)) for i in lost}
    released = {i: first(i, lambda h: not h) for i in lost}
    assert all(t is not None for t in taken.values()), taken
    takeover = max(t for t in taken.values() if t is not None) - deleted
    credentials, configs = Credentials(events), RouteConfigs(events)
    again = credentials.minted_again(since=since)
    rewrites = credentials.unchanged_rewrites(since=since)
    expired = credentials.expired_seconds(since=since, until=until)
    config_rewrites = configs.unchanged_rewrites(since=since)
    figure(
        "sharded_pod_deleted",
        shards_lost=len(lost),
        seconds_delete_to_released=max(
            (r - deleted for r in released.values() if r is not None), default=-1.0
        ),
        seconds_delete_to_held_by_others=takeover,
        bound_seconds=bound,
        new_holders=",".join(sorted({pod_of(after[i]) for i in lost})),
        new_credentials=len(credentials.new_credentials(since=since)),
        minted_again=len(again),
        derived_unchanged_rewrites=len(rewrites),
        route_config_unchanged_rewrites=len(config_rewrites),
        expired_seconds=sum(expired.values()),
        relists=relists,
    )
    timeline = coordination(controller_logs, deleted - 1.0, deleted + bound + 5)
    print(f"\nthe replicas' coordination from 1 s before the delete:\n{timeline}")
    assert len(lost) == SHARDS // SHARDED_REPLICAS
    assert takeover <= bound, (
        f"its shards held by others {takeover:.1f} s after the delete; the replicas' "
        f"coordination from 1 s before it:\n{timeline}"
    )
    assert not again, f"minted again before due: {again}"
    assert not rewrites, f"derived Secrets rewritten with the same credential: {rewrites}"
    assert not config_rewrites, f"route configs rewritten unchanged: {config_rewrites}"
    assert not expired, f"served credentials expired: {expired}"
    check_no_object_overlap(
        controller_logs, helmed.namespaces, figure, "sharded_pod_deleted", since=since
    )


@dataclass(frozen=True)
class Releases:
    """The shard Leases of one count during an upgrade, from a watch of the Leases."""

    last: dict[int, tuple[float, str]]
    """Shard → its last release since the upgrade began: when, and who held it before."""
    holders: dict[int, str]
    """Shard → its holder at the end ('' when released)."""
    unheld: dict[int, float]
    """Shard → the longest it stood released before it was taken again (the last release,
    the hand-over to the new scheme, not counted); 0.0 when it never was."""

    @property
    def by(self) -> set[str]:
        """The Pods whose releases were the last."""
        return {pod_of(h) for _, h in self.last.values()}

    @property
    def latest(self) -> float:
        return max(at for at, _ in self.last.values())


def releases(seen: list[Seen], shards: int, *, since: float) -> Releases:
    last: dict[int, tuple[float, str]] = {}
    holder: dict[int, str] = {}
    unheld = dict.fromkeys(range(shards), 0.0)
    names = {shard_lease(i, shards): i for i in range(shards)}
    for e in seen:
        index = names.get(e.name)
        if index is None or e.type == "DELETED":
            continue
        now_held = holder_of(e.obj)
        if not now_held and holder.get(index) and e.at >= since:
            last[index] = (e.at, holder[index])
        elif now_held and not holder.get(index) and index in last:  # taken again
            unheld[index] = max(unheld[index], e.at - last[index][0])
        holder[index] = now_held
    return Releases(last, holder, unheld)


def first_taken(seen: list[Seen], names: set[str], *, since: float) -> float | None:
    """When one of the Leases ``names`` first had a holder since ``since``."""
    return next(
        (e.at for e in seen if e.name in names and e.at >= since and holder_of(e.obj)), None
    )


def check_handed_over(old: Releases, shards: int, taken: float | None, what: str) -> None:
    """The old scheme's shards (``shards`` of them) were all released by the end, each last by
    the same replica — the last one running — and none stood released longer than the lease
    duration before a replica of that scheme took it again (a stopping replica drains its
    shards and releases each as it is drained; the others take them at their next round once it
    released them all: an expiry would take longer), and the new scheme's first Lease (taken at
    ``taken``) only once those releases stood still for the lease duration."""
    assert sorted(old.last) == list(range(shards)), f"every shard released: {old.last}"
    assert not any(old.holders.values()), f"no shard of {shards} held at the end: {old.holders}"
    assert len(old.by) == 1, (
        f"every shard's last release by the last replica with {shards} shards: "
        f"{ {i: (round(at, 1), pod_of(h)) for i, (at, h) in old.last.items()} }"
    )
    assert max(old.unheld.values()) <= LEASE_DURATION, (
        f"a shard of {shards} stood released before it was taken again (seconds, by shard): "
        f"{ {i: round(t, 1) for i, t in old.unheld.items()} }"
    )
    assert taken is not None, f"{what} took a Lease"
    assert taken >= old.latest + LEASE_DURATION - RETRY_PERIOD, (
        f"{what} took a Lease {taken - old.latest:.1f} s after the last release"
    )


@dataclass(frozen=True)
class SchemeChange:
    """A ``helm upgrade`` from one sharding scheme to another, and the Leases meanwhile."""

    what: Transition
    seen: list[Seen]
    """Every version of the release namespace's Leases, in the API server's order."""
    relists: int
    started: float


def change_scheme(
    cluster: Cluster,
    helmed: Helmed,
    standins: StandIns,
    controller_logs: ControllerLogs,
    new_values: dict[str, Any],
    *,
    settle: Callable[[], object] = lambda: None,
) -> SchemeChange:
    """``helm upgrade`` to ``new_values`` while the Leases are watched and a policy in every
    shard is kept busy; ``settle`` waits for the new scheme before the watch ends."""
    with (
        Recorder(cluster.api, LEASE, namespace=NAMESPACE) as leases,
        Churn(cluster.api, busy(helmed.namespaces), every=0.3),
    ):
        started = time.time()
        what = upgrade(cluster, helmed, standins, controller_logs, new_values)
        settle()
        return SchemeChange(what, leases.events(), leases.relists, started)


def check_scheme_change(
    change: SchemeChange,
    old: Releases,
    shards: int,
    taken: float | None,
    who: str,
    *,
    logs: ControllerLogs,
    helmed: Helmed,
    figure: Callable[..., None],
    name: str,
) -> None:
    """What every change of scheme must keep: :func:`check_handed_over`, a complete Lease
    history, no credential served expired, no overlap, and :func:`check`'s zeros."""
    check_handed_over(old, shards, taken, who)
    assert not change.relists, "the Lease watch missed no version (it never listed again)"
    assert not change.what.expired, f"served credentials expired (seconds): {change.what.expired}"
    check_no_object_overlap(logs, helmed.namespaces, figure, name, since=change.started)
    check(change.what, len(helmed.api_keys))


def test_helm_upgrade_from_six_shards_to_four_waits_for_the_last_of_six_and_mints_nothing(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    sharded: Sharded,
    standins: StandIns,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """A change of N (``sharding.shards`` from 6 to 4, three replicas) while a policy in every
    shard is kept busy: the replicas with 6 share their shards among themselves as the rolling
    update stops them one at a time (the replicas with 4 wait, logging
    ``shards.waiting_for_other_shard_count``, and are not counted in their shares), so every
    shard of 6 is last released by the last of them; no shard of 4 is taken until those releases
    stood still for the lease duration; then the four are shared fairly (2, 1, 1). No credential
    served expired, nothing minted again or rewritten, no object reconciled by two replicas at
    once."""
    wait_settled(cluster)
    new_values = values(
        helmed.base, kind_env.image, replicas=SHARDED_REPLICAS, sharding={"shards": OTHER_SHARDS}
    )
    change = change_scheme(
        cluster,
        helmed,
        standins,
        controller_logs,
        new_values,
        settle=lambda: wait_settled(cluster, shards=OTHER_SHARDS),
    )
    started = change.started
    holders = settled(cluster, OTHER_SHARDS) or {}
    old = releases(change.seen, SHARDS, since=started)
    taken = first_taken(
        change.seen, {shard_lease(i, OTHER_SHARDS) for i in range(OTHER_SHARDS)}, since=started
    )
    new_pods = {p["metadata"]["name"] for p in install.rolled_out(cluster) or []}
    waited = [
        pod
        for pod in new_pods
        if logged_at(
            controller_logs.text(pod), "shards.waiting_for_other_shard_count", after=started
        )
    ]
    report(
        figure,
        "helm_upgrade_six_shards_to_four",
        change.what,
        replicas=SHARDED_REPLICAS,
        last_releases_by=",".join(sorted(old.by)),
        seconds_last_release_to_first_of_four=(taken - old.latest) if taken and old.last else -1.0,
        shares=",".join(str(n) for n in sorted(Counter(holders.values()).values())),
        new_pods_that_waited=len(waited),
        max_seconds_a_shard_of_six_stood_released=max(old.unheld.values()),
    )
    assert sorted(Counter(holders.values()).values()) == [1, 1, 2]
    # each started while a replica with 6 still ran (the rolling update stops the last old one
    # once the last new one is ready)
    assert new_pods, "rolled out"
    assert sorted(waited) == sorted(new_pods), (
        f"every replica with 4 shards waited for those with 6: {sorted(waited)} of "
        f"{sorted(new_pods)}"
    )
    check_scheme_change(
        change,
        old,
        SHARDS,
        taken,
        f"a replica with {OTHER_SHARDS} shards",
        logs=controller_logs,
        helmed=helmed,
        figure=figure,
        name="helm_upgrade_six_shards_to_four",
    )


def test_helm_upgrade_from_four_shards_back_to_one_leader_leaves_no_shard_unheld_and_mints_nothing(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    sharded: Sharded,
    standins: StandIns,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """The way back (``sharding.shards: 1``, the same image, three replicas) from the four shards
    of the change of N, while a policy in every shard is kept busy. Helm deletes the sharding
    Role at once, and the rolling update stops the sharded replicas one at a time: those still
    running take each stopped one's shards (they read the shard Leases by name once they may no
    longer list them), so every shard's last release is the last sharded replica's; the single
    leader takes its Lease once those releases stood still for the lease duration. No
    credential served expired, nothing minted again or rewritten, no object reconciled by two
    replicas at once.

    Break: a sharded replica that skips its rounds while its list is forbidden left the first
    stopped replica's shards unheld until the single leader took over (tests/e2e/test_shards.py
    reproduces it)."""
    wait_settled(cluster, shards=OTHER_SHARDS)
    change = change_scheme(
        cluster,
        helmed,
        standins,
        controller_logs,
        values(helmed.base, kind_env.image, replicas=SHARDED_REPLICAS),
    )
    old = releases(change.seen, OTHER_SHARDS, since=change.started)
    taken = first_taken(change.seen, {install.LEASE}, since=change.started)
    report(
        figure,
        "helm_upgrade_back_to_one_leader",
        change.what,
        replicas=SHARDED_REPLICAS,
        last_releases_by=",".join(sorted(old.by)),
        seconds_last_release_to_single_leader=(taken - old.latest) if taken and old.last else -1.0,
        max_seconds_a_shard_of_four_stood_released=max(old.unheld.values()),
    )
    containers = [c for p in install.rolled_out(cluster) or [] for c in p["spec"]["containers"]]
    assert containers, "rolled out"
    assert not any(a.startswith("--shards") for c in containers for a in c["args"]), "one leader"
    check_scheme_change(
        change,
        old,
        OTHER_SHARDS,
        taken,
        "the single leader",
        logs=controller_logs,
        helmed=helmed,
        figure=figure,
        name="helm_upgrade_back_to_one_leader",
    )


def test_helm_uninstall_leaves_nothing_but_the_kept_crds(
    cluster: Cluster, helmed: Helmed, figure: Any
) -> None:
    # the chains go first, while the controller runs (a policy's finalizer may need it)
    cluster.delete_namespace(*helmed.namespaces)
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


PDBS = objects.Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


def test_a_fresh_helm_install_of_three_replicas_with_six_shards_serves_every_chain_ready(
    kind_env: KindEnv,
    cluster: Cluster,
    helmed: Helmed,
    standins: StandIns,
    controller_logs: ControllerLogs,
    figure: Callable[..., None],
) -> None:
    """``helm install`` with 3 replicas and 6 shards (``sharding.shards``) as a new release, the
    way a user starts sharded, on the cluster the uninstall above left (the kept CRDs, which Helm
    adopts again, and the shards' released Leases): every replica Ready and two shards each, the
    sharded PodDisruptionBudget (``maxUnavailable: 1``), each replica's filtering mode logged
    once (client-side: kind's API server runs without ``ShardedListAndWatch``), ``helm test``
    passes, and an API-key and an STS chain in each shard's namespace become Ready, each object
    reconciled by its shard's holder only; then config/samples, every sample Ready (the chart's
    ``extraVolumes`` and ``extraVolumeMounts`` carry the stand-ins' CA and pod identity token,
    which the chains above do not need)."""
    if helmed.release.deployed():  # run without the uninstall test: start from no release
        helmed.release.uninstall()
    namespaces = one_namespace_per_shard(SHARDS)
    for name in namespaces:
        cluster.create_namespace(name)
    standins.ensure_controller_secret()  # in rotator-system, which the uninstall kept
    mounts = standins.helm_values(identity_namespaces=SAMPLES_NAMESPACE)
    try:
        started = time.monotonic()
        helmed.release.install(values(helmed.base, kind_env.image, **SHARDED, **mounts))
        pods = {p["metadata"]["name"] for p in wait_rolled_out(cluster)}
        rolled_out = time.monotonic() - started
        holders = wait_settled(cluster)
        all_held = time.monotonic() - started
        controller_logs.follow()
        served = serve_chains(
            cluster, helmed, standins, controller_logs, holders, namespaces, suffix="-fresh"
        )
        test_started = time.monotonic()
        out = helmed.release.test()
        tested = time.monotonic() - test_started
        modes = {pod: filtering_modes(controller_logs, pod) for pod in sorted(pods)}
        pdb = cluster.get(PDBS, install.DEPLOYMENT, NAMESPACE) or {}
        cluster.create_namespace(SAMPLES_NAMESPACE)
        samples = sample_documents(standins, cluster, SAMPLES_NAMESPACE)
        samples_started = time.monotonic()
        cluster.apply(samples)
        wait_all_ready(cluster, SAMPLES_NAMESPACE, timeout=180, what="every sample Ready")
        samples_ready = time.monotonic() - samples_started
        sample_routes = {
            r["metadata"]["name"] for r in cluster.items(rapi.ROUTES, namespace=SAMPLES_NAMESPACE)
        }
    finally:
        # the chains go first, while the controller runs (a policy's finalizer may need it)
        cluster.delete_namespace(*namespaces, SAMPLES_NAMESPACE)
    figure(
        "helm_install_sharded",
        replicas=SHARDED_REPLICAS,
        shards=SHARDS,
        seconds_install_to_rolled_out=rolled_out,
        seconds_install_to_every_shard_held=all_held,
        chains=served.chains,
        seconds_chains_ready=served.seconds_ready,
        objects_reconciled=len(served.by),
        seconds_helm_test=tested,
        filtering=",".join(sorted({m for logged in modes.values() for m in logged})),
        samples=len(samples),
        seconds_samples_ready=samples_ready,
    )
    assert helmed.release.revision() == 1, "a new release"
    assert set(holders.values()) == pods, "every replica holds shards"
    assert sorted(Counter(holders.values()).values()) == [2, 2, 2]
    assert pdb.get("spec", {}).get("maxUnavailable") == 1, pdb.get("spec")
    assert modes == {pod: ["client-side"] for pod in pods}, modes
    assert "Succeeded" in out, out
    served.check()
    # every sample's Route, by name: a sample not applied, or another namespace's, would pass a
    # count (wait_all_ready above waited for each object's conditions)
    assert sample_routes == {d["metadata"]["name"] for d in samples if d["kind"] == "Route"}
    assert sample_routes, "config/samples holds Routes"

"""A rolling upgrade the way a user makes it (3e; the kind half of item 4): image A (an earlier
commit of main, its own config/ from a worktree) installed and serving 100 chains of 60 s STS
sessions (the ServiceAccount-token flow, through the stand-ins); then this checkout's CRDs
applied first, then its config/default with image B, rolled out replica by replica by the
Deployment controller. From a watch of every rotator Secret across the upgrade, until each
policy has been renewed by B:

* no served credential expired for a second;
* every new credential was a renewal that was due (issued no earlier than the schedule's
  earliest renewal time of the one it replaced), never one minted again, and the stand-ins'
  STS exchanges match the new credentials;
* no route configuration and no derived Secret was written without a change of what it serves.

The writes and provider calls are printed. The module removes the earlier modules' installation
first (the upgrade needs its own), and its namespace at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import objects
from tests.kind import install
from tests.kind.chains import policies, sts_calls, sts_chains, wait_all_ready
from tests.kind.cluster import REPO, Cluster
from tests.kind.conftest import patch_controller, scan_logs
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.env import KindEnv
from tests.kind.history import BOUNDARY, Credentials, RouteConfigs, balanced_end
from tests.kind.standins import StandIns, install_standins
from tests.kind.watching import Recorder
from tests.support import required
from tests.support.polling import Timeout, wait_for

CHAINS = 100


@dataclass(frozen=True)
class Upgraded:
    credentials: Credentials
    configs: RouteConfigs
    since: float
    until: float
    sts_calls: int
    seconds_to_ready_a: float
    seconds_upgrade: float
    relists: int
    rolled_out: float
    """Wall-clock seconds when B had rolled out: what B's renewals wrote comes after it."""
    route_configs: frozenset[str]
    """The route config Secrets of the chains (one per chain's Route)."""


@pytest.fixture(scope="module")
def upgraded(
    kind_env: KindEnv,
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    standins: StandIns,
    namespaces: Callable[[str], str],
) -> Iterator[Upgraded]:
    if not kind_env.image_a or kind_env.checkout_a is None:
        required.missing("no image A: ROTATOR_KIND_IMAGE_A and ROTATOR_KIND_CHECKOUT_A are not set")
    installation.remove()  # the earlier modules' installation of B, with its namespace
    docs_a = install.render(cluster, kind_env.checkout_a / "config" / "default", kind_env.image_a)
    installation.install(docs_a)
    install_standins(
        kind_env.kubeconfig, kind_env.devkit_image
    )  # their Secret, in the new namespace
    patch_controller(cluster, standins)
    installation.wait_rolled_out()
    controller_logs.follow()

    namespace = namespaces("upgrade")
    docs = sts_chains(namespace, CHAINS)
    routes = frozenset(
        rapi.route_config_secret_name(d["metadata"]["name"]) for d in docs if d["kind"] == "Route"
    )
    standins.register(policies(docs), [])
    started = time.monotonic()
    cluster.apply(docs)
    wait_all_ready(cluster, namespace, timeout=300, what=f"{CHAINS} STS chains Ready under A")
    ready_a = time.monotonic() - started

    with Recorder(
        cluster.api, objects.SECRETS, namespace=namespace, label_selector=rapi.MANAGED_SELECTOR
    ) as secrets:
        since, calls_before = time.time(), sts_calls(standins.calls())
        upgrading = time.monotonic()
        docs_b = install.render(cluster, REPO / "config" / "default", kind_env.image)
        installation.upgrade(docs_b)
        installation.wait_rolled_out(timeout=300)
        rolled_wall, seconds_upgrade = time.time(), time.monotonic() - upgrading
        controller_logs.follow()

        def renewed_by_b() -> bool:
            history = Credentials(secrets.events())
            fresh = {c.secret for c in history.new_credentials(since=rolled_wall)}
            return len(fresh) == CHAINS

        wait_for(renewed_by_b, timeout=120, interval=1.0, what="every policy renewed under B")

        def configs_rewritten_by_b() -> bool:
            return routes <= RouteConfigs(secrets.events()).changed(since=rolled_wall)

        # the Route reconciler follows the renewals: its writes may trail the last one by a
        # moment; a route config it never rewrites is named by the test, not here
        with contextlib.suppress(Timeout):
            wait_for(configs_rewritten_by_b, timeout=30, interval=1.0, what="route configs")
        end = balanced_end(
            lambda: sts_calls(standins.calls()) - calls_before, secrets.events, since=since
        )
        until, calls, events = end.at, end.calls, end.events
        relists = secrets.relists
    yield Upgraded(
        Credentials(events),
        RouteConfigs(events),
        since,
        until,
        calls,
        ready_a,
        seconds_upgrade,
        relists,
        rolled_wall,
        routes,
    )
    scan_logs(controller_logs, standins)


def test_the_upgrade_from_a_to_b_leaves_no_served_credential_expired(
    kind_env: KindEnv, upgraded: Upgraded, figure: Callable[..., None]
) -> None:
    new = upgraded.credentials.new_credentials(since=upgraded.since)
    figure(
        "upgrade",
        image_a_commit=kind_env.image_a_commit or "?",
        chains=CHAINS,
        seconds_to_ready_under_a=upgraded.seconds_to_ready_a,
        seconds_crds_to_rolled_out=upgraded.seconds_upgrade,
        seconds_observed=upgraded.until - upgraded.since,
        sts_calls=upgraded.sts_calls,
        new_credentials=len(new),
        derived_secret_writes=upgraded.credentials.writes(since=upgraded.since),
        route_config_writes=upgraded.configs.writes(since=upgraded.since),
        relists=upgraded.relists,
    )
    lifetimes = upgraded.credentials.lifetimes()
    assert lifetimes, "credentials were recorded"
    # 60 s STS sessions; issued-at is stamped before the exchange, so a loaded second or three
    # shows as a longer lifetime
    assert max(lifetimes) <= 66, "60 s STS sessions"
    expired = upgraded.credentials.expired_seconds(since=upgraded.since, until=upgraded.until)
    assert not expired, f"served credentials expired (seconds): {expired}"


def test_the_upgrade_mints_no_valid_credential_again(upgraded: Upgraded) -> None:
    again = upgraded.credentials.minted_again(since=upgraded.since)
    new = upgraded.credentials.new_credentials(since=upgraded.since)
    assert not again, f"{len(again)} credentials minted again before due, e.g. {again[:3]}"
    assert abs(upgraded.sts_calls - len(new)) <= BOUNDARY, (
        f"{upgraded.sts_calls} STS exchanges for {len(new)} new credentials, all due renewals"
    )


def test_the_upgrade_rewrites_no_route_config_or_derived_secret_that_did_not_change(
    upgraded: Upgraded, figure: Callable[..., None]
) -> None:
    """Every chain's route config was recorded, and B's renewals rewrote each (with a new
    config-hash: the config embeds the session), so "no unchanged rewrite" is about writes that
    happened. A relist at a new resourceVersion counts as a write (tests/kind/history.py).

    Deliberate breaks that fail it: no route config recorded (a Recorder whose selector misses
    the route config Secrets: ``RouteConfigs`` empty); B never rewriting a route config after a
    renewal; a relist hiding a write (tests/unit/test_test_counts.py)."""
    assert len(upgraded.route_configs) == CHAINS
    seen = set(upgraded.configs.versions)
    assert upgraded.route_configs <= seen, (
        f"route configs never recorded: {sorted(upgraded.route_configs - seen)[:5]}"
    )
    rewritten = upgraded.configs.changed(since=upgraded.rolled_out)
    assert upgraded.route_configs <= rewritten, (
        "route configs B's renewals did not rewrite: "
        f"{sorted(upgraded.route_configs - rewritten)[:5]}"
    )
    configs = upgraded.configs.unchanged_rewrites(since=upgraded.since)
    derived = upgraded.credentials.unchanged_rewrites(since=upgraded.since)
    figure("upgrade_unchanged_rewrites", route_configs=len(configs), derived_secrets=len(derived))
    assert not configs, f"route configs rewritten with the same config.yaml: {configs[:5]}"
    assert not derived, f"derived Secrets rewritten with the same credential: {derived[:5]}"

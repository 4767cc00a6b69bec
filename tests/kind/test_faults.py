"""Faults the way a cluster delivers them (3c), to the Deployment's two replicas while they serve
60 s STS sessions (the stand-ins') and the leader is kept busy:

* the leader Pod deleted: another replica (the standby, or the Pod replacing the deleted one when
  it asks first: the released Lease goes to whoever asks first) takes over within the lease
  duration plus a retry period,
  and no reconcile of one replica ever ran while one of the other did (both Pods' logs);
* the kubelet's SIGTERM while reconciles are in flight (the STS stand-in holds their calls until
  the SIGTERM has arrived): they finish, the Lease is released (empty holder) and the container
  exits 0, inside the grace period;
* the container killed by the runtime (crictl) and OOM-killed under a tiny memory limit (the
  ``oom`` overlay): it restarts, and nothing is lost.

Throughout, every derived Secret's versions are recorded: no served credential may expire, and
every new one must be a renewal that was due (or asked for) — never one minted again — with the
stand-ins' STS exchanges matching the new credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from tests.kind import install
from tests.kind.chains import (
    api_key_chain,
    new_api_key,
    not_ready,
    policies,
    sts_calls,
    sts_chains,
    wait_all_ready,
)
from tests.kind.cluster import PODS, Cluster
from tests.kind.conftest import Configured
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.env import KindEnv
from tests.kind.history import Credentials, balanced_end, quiet_start
from tests.kind.watching import Recorder
from tests.support.churn import Churn
from tests.support.polling import wait_for
from tests.support.reconcilelog import Reconcile, entries, logged_at, longest_overlap, reconciles

# controller-runtime's defaults, which the shipped Deployment keeps (no flag changes them:
# controllers/runtime/leaderelection.py LeaderElectionOptions)
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0
RETRY_JITTER = 1.2
"""A candidate retries every retry_period * (1 + U(0, 1.2))."""
GRACE_PERIOD = 40.0
"""The Deployment's terminationGracePeriodSeconds."""
STS_POLICIES = 12
STS_RECONCILE = "backendsecuritypolicy:sts-"
"""How an STS policy's reconcile is keyed in the logs (tests/support/reconcilelog.py: the
policy controller's name, then the policy's, :func:`sts_chains`' prefix)."""
STS_RECEIVED = "sts.received"
"""The STS stand-in's count of requests that arrived (answered or held)."""


@dataclass
class Faults:
    namespace: str
    secrets: Recorder
    configured: Configured

    def sts_calls(self) -> int:
        return sts_calls(self.configured.standins.calls())

    def window_start(self) -> tuple[float, int]:
        """``since`` and the STS exchanges before it, at a moment with no renewal in flight
        (:func:`~tests.kind.history.quiet_start`)."""
        start = quiet_start(self.sts_calls, self.secrets.events)
        return start.at, start.calls


@pytest.fixture(scope="module")
def faults(
    cluster: Cluster, configured: Configured, namespaces: Callable[[str], str]
) -> Iterator[Faults]:
    namespace = namespaces("faults")
    docs = sts_chains(namespace, STS_POLICIES) + api_key_chain(
        namespace, "busy", new_api_key("busy")
    )
    configured.standins.register(policies(docs), [])
    cluster.apply(docs)
    wait_all_ready(cluster, namespace, timeout=120, what="the fault chains Ready")
    with Recorder(
        cluster.api, objects.SECRETS, namespace=namespace, label_selector=rapi.MANAGED_SELECTOR
    ) as secrets:
        yield Faults(namespace, secrets, configured)


def check_credentials(
    faults: Faults,
    *,
    since: float,
    calls_before: int,
    figure: Callable[..., None],
    what: str,
    killed: bool = False,
) -> None:
    """Over ``since`` → now: no served credential expired, none was minted again, and the STS
    exchanges match the new credentials — plus, when a container was ``killed``, at most one
    whose call was in flight then (its Secret was never written: nothing serves it).

    "Now" is the first reading within :data:`~tests.kind.history.SETTLE` seconds at which the
    exchanges fit that bound (:func:`~tests.kind.history.balanced_end`): a renewal whose
    exchange is made and whose Secret is not yet written is in flight, not lost. A lost
    credential never fits, and the assertion below names it."""
    lost = 1 if killed else 0
    end = balanced_end(
        lambda: faults.sts_calls() - calls_before,
        faults.secrets.events,
        since=since,
        fits=lambda made, new: new <= made <= new + lost,
    )
    until, calls = end.at, end.calls
    history = Credentials(end.events)
    expired = history.expired_seconds(since=since, until=until)
    again = history.minted_again(since=since)
    new = history.new_credentials(since=since)
    figure(
        f"{what}_credentials",
        new_credentials=len(new),
        sts_calls=calls,
        minted_again=len(again),
        expired_seconds=sum(expired.values()),
        relists=faults.secrets.relists,
    )
    assert not expired, f"served credentials expired: {expired}"
    assert not again, f"minted again before due: {again}"
    assert len(new) <= calls <= len(new) + lost, (
        f"{calls} STS exchanges, {len(new)} new credentials"
    )


def lease_holders(recorder: Recorder) -> list[tuple[float, str]]:
    """(when seen, holderIdentity) of each version of the Lease."""
    return [
        (seen.at, str((seen.obj.get("spec") or {}).get("holderIdentity") or ""))
        for seen in recorder.events()
        if seen.name == install.LEASE
    ]


def last_log_time(text: str) -> float:
    return max((at for at, _ in entries(text)), default=time.time())


def working_since(logs: ControllerLogs, pod: str, since: float, at_least: int = 5) -> bool:
    started = [r for r in reconciles(logs.text(pod), ended_at=time.time()) if r.start > since]
    return len(started) >= at_least


def new_leader(cluster: Cluster, logs: ControllerLogs, held: str, timeout: float) -> str:
    """The Pod that took the Lease over from the identity ``held`` (its logs followed)."""

    def taken() -> str | None:
        identity = install.holder(cluster)
        if identity and identity != held:
            logs.follow()
            return identity.rsplit("_", 1)[0]
        return None

    return wait_for(taken, timeout=timeout, interval=0.1, what="a new holder of the Lease")


def settled_leader(
    cluster: Cluster, installation: install.Installation, logs: ControllerLogs
) -> str:
    installation.wait_rolled_out()
    logs.follow()
    return wait_for(lambda: install.leader(cluster), timeout=60, what="a leader")


def check_no_overlap(
    logs: ControllerLogs, old: str, new: str, figure: Callable[..., None], what: str
) -> tuple[list[Reconcile], list[Reconcile]]:
    old_text = logs.text(old)
    a = reconciles(old_text, ended_at=last_log_time(old_text))
    b = reconciles(logs.text(new), ended_at=time.time())
    assert a, "the old leader reconciled"
    assert b, "the new leader reconciled"
    overlap = longest_overlap(a, b)
    figure(
        f"{what}_overlap",
        reconciles_old=len(a),
        reconciles_new=len(b),
        longest_overlap_seconds=max(overlap, 0.0),
    )
    assert overlap <= 0.0, f"reconciles of the two replicas overlapped by {overlap:.3f} s"
    return a, b


def test_deleting_the_leader_pod_hands_over_within_lease_plus_retry_and_work_never_overlaps(
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    faults: Faults,
    figure: Callable[..., None],
) -> None:
    leader = settled_leader(cluster, installation, controller_logs)
    held = install.holder(cluster)
    since, calls_before = faults.window_start()
    with Churn(cluster.api, [(faults.namespace, "busy")]):
        wait_for(lambda: working_since(controller_logs, leader, since), what="the leader works")
        cluster.kubectl("-n", install.NAMESPACE, "delete", "pod", leader, "--wait=false")
        deleted = time.time()
        standby = new_leader(
            cluster, controller_logs, held, LEASE_DURATION + RETRY_PERIOD * (1 + RETRY_JITTER) + 5
        )
        wait_for(lambda: controller_logs.ended(leader), timeout=GRACE_PERIOD + 10, what="old gone")
        wait_for(
            lambda: working_since(controller_logs, standby, deleted),
            timeout=30,
            what="the new leader works",
        )
    elected = logged_at(controller_logs.text(standby), "leader.elected", after=deleted)
    stopped = logged_at(controller_logs.text(leader), "manager.stopped", after=deleted)
    assert elected is not None
    assert stopped is not None
    takeover = elected - deleted
    figure(
        "leader_pod_deleted",
        seconds_delete_to_new_leader=takeover,
        seconds_delete_to_old_stopped=stopped - deleted,
        bound_seconds=LEASE_DURATION + RETRY_PERIOD,
    )
    assert takeover <= LEASE_DURATION + RETRY_PERIOD * (1 + RETRY_JITTER), "lease + retry"
    check_no_overlap(controller_logs, leader, standby, figure, "leader_pod_deleted")
    settled_leader(cluster, installation, controller_logs)
    wait_renewed_since(faults, deleted)
    check_credentials(
        faults, since=since, calls_before=calls_before, figure=figure, what="leader_pod_deleted"
    )


def wait_renewed_since(faults: Faults, since: float) -> None:
    """Every STS policy served a new credential after ``since``: renewals went on across the
    fault, so the window the credential checks cover includes a renewal of each."""

    def renewed() -> bool:
        fresh = Credentials(faults.secrets.events()).new_credentials(since=since)
        return len({c.secret for c in fresh}) >= STS_POLICIES

    wait_for(renewed, timeout=90, interval=0.5, what="every STS policy renewed since the fault")


def request_rotations(cluster: Cluster, namespace: str, count: int) -> None:
    """Asks for a rotation of ``count`` STS policies at once: that many reconciles wait on the
    provider together."""
    value = str(time.time())
    for i in range(count):
        cluster.api.patch(
            rapi.POLICIES,
            f"sts-{i:03d}",
            {"metadata": {"annotations": {rapi.ROTATE_REQUESTED_ANNOTATION: value}}},
            namespace=namespace,
        )


HOLD_SECONDS = 6.0
"""How long the STS stand-in holds each call of the SIGTERM test at most (it answers by itself
after that, from the call's arrival): well inside the controller's 10 s read timeout
(rotator/providers/aws/clients.py), so that every held call is answered to the reconcile that
made it and none is retried, even if the test cannot reach the stand-ins to release them."""


@contextmanager
def holding_sts(faults: Faults) -> Iterator[Callable[[], int]]:
    """The STS stand-in holds every call until the block ends (then answers them all), each at
    most :data:`HOLD_SECONDS`; yields how many calls arrived since the block began. Not a sleep:
    the test decides when its reconciles may finish, so "in flight at SIGTERM" holds on any
    machine. The release is retried: a hold left on would slow every later test's STS calls."""
    standins = faults.configured.standins
    before = standins.calls().get(STS_RECEIVED, 0)
    try:
        standins.set_mode("sts", "hang", hang_seconds=HOLD_SECONDS)
        yield lambda: standins.calls().get(STS_RECEIVED, 0) - before
    finally:  # wait_for asks again when an ask fails (the API server's proxy)
        wait_for(lambda: standins.set_mode("sts", "ok"), what="the STS stand-in answers again")


def terminated_state(pods: Recorder, pod: str) -> dict[str, Any] | None:
    """The manager container's terminated state, as last reported before the Pod went."""
    found = None
    for seen in pods.events():
        if seen.name != pod:
            continue
        for status in (seen.obj.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == install.CONTAINER and "terminated" in (status.get("state") or {}):
                found = status["state"]["terminated"]
    return found


def test_sigterm_from_the_kubelet_drains_in_flight_reconciles_releases_the_lease_and_exits_0(
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    faults: Faults,
    figure: Callable[..., None],
) -> None:
    leader = settled_leader(cluster, installation, controller_logs)
    held = install.holder(cluster)
    since, calls_before = faults.window_start()
    with (
        Recorder(
            cluster.api, PODS, namespace=install.NAMESPACE, label_selector=install.SELECTOR
        ) as pods,
        Recorder(cluster.api, objects.LEASES, namespace=install.NAMESPACE) as lease,
        Churn(cluster.api, [(faults.namespace, "busy")]),
    ):
        wait_for(lambda: working_since(controller_logs, leader, since), what="the leader works")
        with holding_sts(faults) as held_calls:
            request_rotations(cluster, faults.namespace, STS_POLICIES)
            # the reconciles wait on STS until it is released: in flight when SIGTERM comes
            wait_for(lambda: held_calls() > 0, timeout=10, interval=0.1, what="an STS call held")
            cluster.kubectl("-n", install.NAMESPACE, "delete", "pod", leader, "--wait=false")
            deleted = time.time()
            wait_for(
                lambda: logged_at(
                    controller_logs.text(leader), "rotator.stop_requested", after=deleted - 1
                ),
                timeout=HOLD_SECONDS,
                interval=0.1,
                what="the kubelet's SIGTERM while STS calls are held",
            )
        wait_for(lambda: terminated_state(pods, leader), timeout=GRACE_PERIOD + 10, what="exit")
        standby = new_leader(cluster, controller_logs, held, 30)
        # its reconciles are what the overlap check compares (it had logged none yet once)
        wait_for(
            lambda: working_since(controller_logs, standby, deleted),
            timeout=30,
            what="the new leader works",
        )
    state = terminated_state(pods, leader)
    assert state is not None
    text = controller_logs.text(leader)
    asked = logged_at(text, "rotator.stop_requested", after=deleted - 1)
    released = logged_at(text, "leader.released", after=deleted - 1)
    stopped = [
        (at, e)
        for at, e in entries(text)
        if e.get("event") == "manager.stopped" and at >= deleted - 1
    ]
    assert asked is not None, "the kubelet's SIGTERM reached the controller"
    old = reconciles(text, ended_at=last_log_time(text))
    in_flight = [r for r in old if r.start <= asked < r.end]
    # an STS policy's reconcile, held on its STS call: the churn policy's or a backend's
    # reconcile spanning the stop line would not show that the drain waits for a provider call
    # (break: no holding_sts, so only churn reconciles are in flight)
    sts_in_flight = [r for r in in_flight if r.key.startswith(STS_RECONCILE)]
    holders = lease_holders(lease)
    emptied = [
        at
        for (at, holder), (_, before) in zip(holders[1:], holders, strict=False)
        if not holder and before.startswith(f"{leader}_")
    ]
    figure(
        "sigterm",
        reconciles_in_flight_at_sigterm=len(in_flight),
        sts_policy_reconciles_in_flight_at_sigterm=len(sts_in_flight),
        seconds_sigterm_to_released=(released - asked) if released else -1.0,
        seconds_sigterm_to_stopped=(stopped[0][0] - asked) if stopped else -1.0,
        exit_code=state.get("exitCode"),
        reason=state.get("reason"),
    )
    assert state.get("exitCode") == 0, state
    assert stopped, "manager.stopped logged"
    assert stopped[0][1].get("drained") is True, stopped
    assert sts_in_flight, f"STS policy reconciles were in flight at SIGTERM: {in_flight}"
    assert all(r.finished for r in old), "no reconcile abandoned: the drain finished them"
    assert released is not None, "leader.released logged"
    assert released >= max(r.end for r in old), "released after the drain"
    assert emptied, f"the Lease was released (empty holder): {holders}"
    assert clocks.parse_rfc3339(state["finishedAt"]) - asked <= GRACE_PERIOD, (
        "inside terminationGracePeriodSeconds"
    )
    check_no_overlap(controller_logs, leader, standby, figure, "sigterm")
    settled_leader(cluster, installation, controller_logs)
    check_credentials(faults, since=since, calls_before=calls_before, figure=figure, what="sigterm")


def container_status(cluster: Cluster, pod: str) -> dict[str, Any]:
    obj = cluster.get(PODS, pod, install.NAMESPACE) or {}
    for status in (obj.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == install.CONTAINER:
            return dict(status)
    return {}


def test_a_container_killed_by_the_runtime_restarts_and_mints_nothing_again(
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    faults: Faults,
    figure: Callable[..., None],
) -> None:
    leader = settled_leader(cluster, installation, controller_logs)
    restarts = int(container_status(cluster, leader)["restartCount"])
    held = install.holder(cluster)
    since, calls_before = faults.window_start()
    container = cluster.container_id(install.NAMESPACE, leader, install.CONTAINER)
    cluster.crictl("stop", "--timeout", "0", container)  # SIGKILL, no grace
    killed = time.time()
    status = wait_for(
        lambda: (
            (s := container_status(cluster, leader)).get("restartCount", 0) > restarts
            and s.get("ready")
            and s
        ),
        timeout=120,
        interval=0.5,
        what="the killed container restarted and Ready",
    )
    ready_after = time.time() - killed

    def new_holder_of_the_lease() -> str | None:
        identity = install.holder(cluster)
        return identity if identity and identity != held else None

    new_holder = wait_for(
        new_holder_of_the_lease,
        timeout=LEASE_DURATION + RETRY_PERIOD * (1 + RETRY_JITTER) + 30,
        what="a new holder of the Lease",
    )
    new_leader = new_holder.rsplit("_", 1)[0]
    controller_logs.follow()
    wait_for(
        lambda: working_since(controller_logs, new_leader, killed, at_least=1),
        timeout=60,
        what="the new leader at work",
    )
    elected = logged_at(controller_logs.text(new_leader), "leader.elected", after=killed)
    terminated = status.get("lastState", {}).get("terminated", {})
    figure(
        "runtime_kill",
        seconds_kill_to_ready=ready_after,
        seconds_kill_to_new_leader=(elected - killed) if elected else -1.0,
        exit_code=terminated.get("exitCode"),
        reason=terminated.get("reason"),
        new_leader_is_restarted_pod=new_leader == leader,
    )
    assert terminated.get("exitCode") == 137, terminated
    wait_renewed_since(faults, killed)
    wait_for(lambda: not not_ready(cluster, faults.namespace), timeout=60, what="all still Ready")
    check_credentials(
        faults,
        since=since,
        calls_before=calls_before,
        figure=figure,
        what="runtime_kill",
        killed=True,
    )


def oom_killed(cluster: Cluster) -> dict[str, Any] | None:
    for pod in install.controller_pods(cluster):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            last = (status.get("lastState") or {}).get("terminated") or {}
            if last.get("reason") == "OOMKilled" and status.get("restartCount", 0) >= 1:
                return {"pod": pod["metadata"]["name"], **status}
    return None


def test_an_oom_killed_container_restarts_and_the_serving_replicas_lose_nothing(
    kind_env: KindEnv,
    cluster: Cluster,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    faults: Faults,
    figure: Callable[..., None],
) -> None:
    serving = {p["metadata"]["name"] for p in installation.wait_rolled_out()}
    restarts = {p: int(container_status(cluster, p)["restartCount"]) for p in serving}
    since, calls_before = faults.window_start()
    tiny = install.render(cluster, install.OVERLAYS / "oom", kind_env.image)
    cluster.apply(tiny)
    applied, applied_wall = time.monotonic(), time.time()
    try:
        found = wait_for(lambda: oom_killed(cluster), timeout=120, interval=0.5, what="OOMKilled")
        seen_after = time.monotonic() - applied
        assert found["pod"] not in serving, "the rollout's new Pod, under the tiny limit"
        assert {p["metadata"]["name"] for p in install.controller_pods(cluster)} >= serving
        figure("oom", seconds_apply_to_oomkilled=seen_after, restart_count=found["restartCount"])
    finally:
        cluster.apply(faults.configured.docs)  # the limit as it was: the rollout is undone
    pods = installation.wait_rolled_out()
    controller_logs.follow()
    assert {p["metadata"]["name"] for p in pods} == serving, "the serving replicas stayed"
    assert {p: int(container_status(cluster, p)["restartCount"]) for p in serving} == restarts
    wait_renewed_since(faults, applied_wall)
    check_credentials(faults, since=since, calls_before=calls_before, figure=figure, what="oom")

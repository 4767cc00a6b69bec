"""Leader election under faults: two ``rotator run`` replicas (own processes, the controller's
ServiceAccount) compete for one Lease while the test keeps the leader busy; from the replicas'
logs (``reconcile.started`` … ``reconcile.done``, timestamped) the reconciles of the two must
never overlap in time.

* The leader's Lease renewals break mid-response (a proxy cuts them, or withholds the answer):
  the leader exits, code 1, within the renew deadline; the other takes over.
* SIGTERM while the leader is in a slow reconcile (STS hangs): it finishes that reconcile, then
  releases the Lease; the standby starts no sooner.
* SIGKILL: the standby takes over once the Lease has expired, not before.

Takeover times and the longest overlap are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controllers.runtime import client as clients
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support.apiproxy import APIProxy, lease_renewals
from tests.support.chain import AWSChain
from tests.support.churn import Churn
from tests.support.controller import ControllerProcess, service_account_kubeconfig
from tests.support.polling import wait_for
from tests.support.reconcilelog import Reconcile, logged_at, longest_overlap, reconciles

# controller-runtime's defaults, which `rotator run` uses (controllers/runtime/leaderelection.py)
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0
EXIT_MARGIN = 1.5  # seconds from giving up to the process being gone, on a loaded test machine
SLOW = 6.0  # seconds STS hangs in the SIGTERM test


@dataclass
class Replicas:
    lease: str
    make: Callable[..., ControllerProcess]


@pytest.fixture
def replicas(
    control_plane: LocalControlPlane,
    api: clients.Client,
    installed: None,
    namespace: str,
    sts: STSProxy,
    moto: str,
    tmp_path: Path,
) -> Iterator[Replicas]:
    """Makes ``rotator run`` replicas for the test's namespace, all on one fresh Lease."""
    lease = f"faults-{uuid.uuid4().hex[:8]}"
    made: list[ControllerProcess] = []
    env = {
        "AWS_ENDPOINT_URL_STS": sts.url,
        "AWS_ENDPOINT_URL_IAM": moto,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
    }

    def make(name: str, *, via: APIProxy | None = None) -> ControllerProcess:
        workdir = tmp_path / name
        workdir.mkdir()
        kubeconfig = service_account_kubeconfig(
            control_plane,
            api,
            workdir / "kubeconfig",
            server=via.url if via else None,
            ca_file=via.ca_file if via else None,
        )
        replica = ControllerProcess(
            kubeconfig, workdir, env=env, args=("--namespace", namespace), lease=lease
        )
        made.append(replica)
        return replica

    yield Replicas(lease, make)
    for replica in made:
        if replica.proc is not None:
            replica.proc.close()


def busy_chain(api: clients.Client, namespace: str) -> AWSChain:
    chain = AWSChain(api, namespace)
    chain.secret("key", apiKey="sk-leader-faults-test-value")
    chain.api_key_policy("busy", secret="key", targets=[])
    chain.wait_condition("policy", "busy", "Ready", "True", timeout=30)
    return chain


def leading(replica: ControllerProcess, lease: str) -> bool:
    return replica.metric("leader_election_master_status", name=lease) == 1


def reconciled_since(replica: ControllerProcess, since: float, at_least: int = 5) -> bool:
    """The replica started ``at_least`` reconciles after ``since``: it is working."""
    started = [r for r in reconciles(replica.logs(), ended_at=time.time()) if r.start > since]
    return len(started) >= at_least


def check_no_overlap(
    old: ControllerProcess, old_ended: float, new: ControllerProcess, what: str
) -> tuple[list[Reconcile], list[Reconcile]]:
    a = reconciles(old.logs(), ended_at=old_ended)
    b = reconciles(new.logs(), ended_at=time.time())
    assert a, "the old leader reconciled"
    assert b, "the new leader reconciled"
    overlap = longest_overlap(a, b)
    gap = min(r.start for r in b) - max(r.end for r in a)
    print(
        f"\n{what}: {len(a)} + {len(b)} reconciles, longest overlap {max(overlap, 0.0):.3f} s, "
        f"first reconcile of the new leader {gap:.2f} s after the last of the old"
    )
    assert overlap <= 0.0, f"reconciles of the two replicas overlapped by {overlap:.3f} s"
    return a, b


@pytest.mark.parametrize("fault", ["cut", "stall"])
def test_a_leader_whose_renewals_break_exits_within_the_renew_deadline(
    fault: str,
    control_plane: LocalControlPlane,
    api: clients.Client,
    namespace: str,
    replicas: Replicas,
    tmp_path: Path,
) -> None:
    proxy = APIProxy(
        control_plane.server,
        control_plane.ca_file,
        tmp_path / "proxy",
        lease_renewals(manifests.NAMESPACE, replicas.lease),
    ).start()
    try:
        a = replicas.make("a", via=proxy).start()
        b = replicas.make("b").start(wait_leading=False)
        pa = a.proc
        assert pa is not None
        busy_chain(api, namespace)
        with Churn(api, [(namespace, "busy")]):
            since = time.time()
            wait_for(lambda: reconciled_since(a, since), what="a reconciles the churn")
            proxy.fault = fault
            faulted = time.monotonic()
            wait_for(lambda: pa.popen.poll() is not None, timeout=30, what="a exits")
            gone, gone_wall = time.monotonic(), time.time()
            wait_for(lambda: leading(b, replicas.lease), timeout=LEASE_DURATION + 10, what="b")
            since = time.time()
            wait_for(lambda: reconciled_since(b, since), what="b reconciles the churn")
        elected = logged_at(b.logs(), "leader.elected")
        assert elected is not None
        print(
            f"\n{fault} renewals: the leader exited {gone - faulted:.2f} s after its renewals "
            f"broke (renew deadline {RENEW_DEADLINE:.0f} s); takeover "
            f"{elected - gone_wall:.2f} s after it exited"
        )
        assert pa.popen.returncode == 1, a.logs()[-3000:]
        assert proxy.count("cut" if fault == "cut" else "stalled") >= 1
        assert '"leader.lost"' in a.logs()
        assert gone - faulted <= RENEW_DEADLINE + EXIT_MARGIN, "gave up within the renew deadline"
        check_no_overlap(a, gone_wall, b, f"{fault} renewals")
    finally:
        proxy.stop()


def test_sigterm_during_a_slow_reconcile_hands_over_only_after_it_ended(
    api: clients.Client, namespace: str, replicas: Replicas, sts: STSProxy
) -> None:
    a = replicas.make("a").start()
    b = replicas.make("b").start(wait_leading=False)
    assert a.proc is not None
    chain = busy_chain(api, namespace)
    with Churn(api, [(namespace, "busy")]):
        sts.hang_seconds = SLOW
        sts.set_mode("hang")
        try:
            received = sts.count("received")
            chain.aws_policy(
                "slow",
                [],
                {"serviceAccountToken": {"serviceAccountName": "default", "awsRoleArn": ROLE_ARN}},
            )
            wait_for(lambda: sts.count("received") > received, what="a's reconcile waits on STS")
            wait_for(
                lambda: any(
                    r.key.endswith(":slow") and not r.finished
                    for r in reconciles(a.logs(), ended_at=time.time())
                ),
                what="a's reconcile of the slow policy in flight",
            )
            a.proc.popen.send_signal(signal.SIGTERM)
            terminated, terminated_wall = time.monotonic(), time.time()
            code = a.proc.popen.wait(timeout=45)
            gone, gone_wall = time.monotonic(), time.time()
            wait_for(lambda: leading(b, replicas.lease), timeout=LEASE_DURATION, what="b leads")
        finally:
            sts.set_mode("ok")
            sts.hang_seconds = 60.0
        since = time.time()
        wait_for(lambda: reconciled_since(b, since), what="b reconciles the churn")
    released = logged_at(a.logs(), "leader.released")
    elected = logged_at(b.logs(), "leader.elected")
    assert code == 0, a.logs()[-3000:]
    assert released is not None, "a released the lease"
    assert elected is not None
    print(
        f"\nSIGTERM during a {SLOW:.0f} s reconcile: takeover {elected - terminated_wall:.2f} s "
        f"after the SIGTERM (lease released after {released - terminated_wall:.2f} s, taken "
        f"{elected - released:.2f} s later); the old leader exited after {gone - terminated:.2f} s"
    )
    assert elected >= released, "the standby took the lease only once released"
    old, _ = check_no_overlap(a, gone_wall, b, "SIGTERM")
    slow = [r for r in old if r.key.endswith(":slow")]
    assert slow, "a reconciled the slow policy"
    assert all(r.finished for r in old), "no reconcile abandoned on a graceful stop"
    assert max(r.end for r in slow) > terminated_wall, "the slow reconcile was still running"
    assert released >= max(r.end for r in old), "released after the last reconcile ended"


def test_sigkill_takeover_waits_for_the_lease_to_expire(
    api: clients.Client, namespace: str, replicas: Replicas
) -> None:
    a = replicas.make("a").start()
    b = replicas.make("b").start(wait_leading=False)
    assert a.proc is not None
    busy_chain(api, namespace)
    with Churn(api, [(namespace, "busy")]):
        since = time.time()
        wait_for(lambda: reconciled_since(a, since), what="a reconciles the churn")
        a.proc.kill()
        killed_wall = time.time()
        wait_for(
            lambda: leading(b, replicas.lease),
            timeout=LEASE_DURATION + 2 * RETRY_PERIOD * 2.2 + 5,
            interval=0.1,
            what="b leads",
        )
        since = time.time()
        wait_for(lambda: reconciled_since(b, since), what="b reconciles the churn")
    elected = logged_at(b.logs(), "leader.elected")
    assert elected is not None
    takeover = elected - killed_wall
    print(f"\nSIGKILL: takeover after {takeover:.2f} s (lease {LEASE_DURATION:.0f} s)")
    assert takeover >= LEASE_DURATION - RETRY_PERIOD, "never while the lease was live"
    check_no_overlap(a, killed_wall, b, "SIGKILL")

"""Benchmark: how late rotations run against their scheduled time, and STS calls per policy per
hour, for N policies minting 60 s STS sessions (moto behind the STS proxy) over a window.
Prints figures; asserts nothing.

    make bench    (or: KUBEBUILDER_ASSETS=... python -m tests.bench.rotation --policies 20 --seconds 180)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import threading
import time
from pathlib import Path

from moto.server import ThreadedMotoServer

from controllers import logs
from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import objects, restconfig
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import SERVICE_ACCOUNT_ISSUER, LocalControlPlane
from rotator_devkit.devenv.standins.sts import ASSUME, STSProxy
from tests.support.chain import AWSChain
from tests.support.controller import (
    ControllerProcess,
    install_crds,
    install_rbac,
    service_account_kubeconfig,
)
from tests.support.polling import wait_for
from tests.support.recording import LatestStates, percentile

ROLE = "arn:aws:iam::123456789012:role/bedrock"
NAMESPACE = "bench"


class Schedules(LatestStates):
    """Every renewalTime each policy's status announced, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.renewals: dict[str, list[float]] = {}

    def record(self, obj: Body) -> None:
        value = (obj.get("status") or {}).get("renewalTime")
        if not value:
            return
        with self.lock:
            seen = self.renewals.setdefault(objects.name(obj), [])
            t = clocks.parse_rfc3339(value)
            if not seen or seen[-1] != t:
                seen.append(t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policies", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=180.0)
    args = parser.parse_args()
    logs.configure("text", "warning")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="rotator-bench-"))
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    with LocalControlPlane(assets.find()) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig)))
        install_crds(api)
        install_rbac(api)
        sts = STSProxy(f"http://{host}:{port}", lifetime=60).start()
        sts.trust(
            SERVICE_ACCOUNT_ISSUER,
            api.request("GET", "/openid/v1/jwks", accept="application/jwk-set+json"),
            "sts.amazonaws.com",
        )
        sts.roles.add(ROLE)
        env = {"AWS_ENDPOINT_URL_STS": sts.url, "AWS_EC2_METADATA_DISABLED": "true"}
        controller = ControllerProcess(
            service_account_kubeconfig(cp, api, workdir / "kubeconfig"), workdir, env=env
        )
        controller.start()
        api.create(objects.NAMESPACES, {"metadata": {"name": NAMESPACE}})
        wait_for(
            lambda: api.get(objects.SERVICEACCOUNTS, "default", namespace=NAMESPACE),
            what="default ServiceAccount",
        )
        schedules = Schedules()
        watcher = Informer(api, rapi.POLICIES, namespaces=[NAMESPACE])
        watcher.add_handler(schedules)
        watcher.start()
        chain = AWSChain(api, NAMESPACE)
        names = [f"p{i:03d}" for i in range(args.policies)]
        for name in names:
            chain.aws_policy(
                name,
                [],
                {"serviceAccountToken": {"serviceAccountName": "default", "awsRoleArn": ROLE}},
            )
        for name in names:
            chain.wait_condition("policy", name, "Ready", "True", timeout=120)
        started = time.time()
        time.sleep(args.seconds)  # the measurement window, not synchronisation
        ended = time.time()
        lateness, calls_in_window = [], 0
        for name in names:
            calls = [c.at for c in sts.calls_of(ASSUME, f"rotator.{NAMESPACE}.{name}")]
            calls_in_window += sum(1 for t in calls if started <= t < ended)
            with schedules.lock:
                planned = list(schedules.renewals.get(name, []))
            for scheduled, actual in zip(planned, calls[1:], strict=False):
                lateness.append(actual - scheduled)
        controller.stop()
        watcher.stop()
        sts.stop()
    moto.stop()
    hours = (ended - started) / 3600
    print(f"\n{args.policies} policies, 60 s STS sessions, {args.seconds:.0f} s window")
    print(
        f"  lateness of rotations vs renewalTime ({len(lateness)} rotations): "
        f"p50 {percentile(lateness, 50) * 1000:.0f} ms, p99 {percentile(lateness, 99) * 1000:.0f} ms, "
        f"max {max(lateness) * 1000:.0f} ms, mean {statistics.mean(lateness) * 1000:.0f} ms"
    )
    per_hour = calls_in_window / args.policies / hours
    print(f"  STS calls per policy per hour: {per_hour:.0f} with 60 s sessions")
    print("  (with the default 1 h sessions and 2/3 renewal that is 1.5 per policy per hour)")


if __name__ == "__main__":
    main()

"""Benchmark: the controller's memory as Secrets it has nothing to do with pile up. Prints
figures; asserts nothing.

    KUBEBUILDER_ASSETS=... python -m tests.bench.memory --steps 0,2000,5000,10000 --size 8192

rotator watches every Secret (a policy may name any of them) but as metadata only, stripped of
managedFields, and reads the data of the few a policy names. So its memory should grow with the
number of Secrets by a few hundred bytes each, not by their data. After each batch the policy's
own Secret is updated and the benchmark waits for the derived Secret to follow: the Secret watch
delivers events in order, so by then the controller has seen every Secret of the batch.
"""

from __future__ import annotations

import argparse
import base64
import functools
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controllers import logs
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.support.chain import Chain
from tests.support.controller import (
    ControllerProcess,
    install_crds,
    install_rbac,
    service_account_kubeconfig,
)
from tests.support.polling import wait_for

NAMESPACE = "bench"
NOISE = "unrelated"


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def caught_up(chain: Chain, value: str) -> bool:
    return (chain.secret_data("rotator-bsp-p") or {}).get("apiKey") == value


def create_noise(api: clients.Client, start: int, stop: int, size: int) -> None:
    payload = base64.b64encode(b"x" * size).decode()

    def one(i: int) -> None:
        api.create(
            objects.SECRETS,
            {"metadata": {"name": f"noise-{i:06d}"}, "data": {"blob": payload}},
            namespace=NOISE,
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(start, stop)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="0,2000,5000,10000", help="Secret counts to measure at")
    parser.add_argument("--size", type=int, default=8192, help="bytes of data per Secret")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    logs.configure("text", "warning")
    workdir = Path(tempfile.mkdtemp(prefix="rotator-bench-"))
    rows: list[tuple[int, float]] = []
    with LocalControlPlane(assets.find()) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig)))
        install_crds(api)
        install_rbac(api)
        for ns in (NAMESPACE, NOISE):
            api.create(objects.NAMESPACES, {"metadata": {"name": ns}})
        controller = ControllerProcess(
            service_account_kubeconfig(cp, api, workdir / "kubeconfig"), workdir
        )
        controller.start()
        assert controller.proc is not None
        pid = controller.proc.popen.pid
        chain = Chain(api, NAMESPACE)
        chain.backend("b")
        chain.route("r", ["b"])
        chain.api_key_policy("p", secret="key", targets=["b"])
        created = 0
        for step, count in enumerate(steps):
            create_noise(api, created, count, args.size)
            created = max(created, count)
            value = f"sk-bench-{step:04d}"
            chain.secret("key", apiKey=value)
            wait_for(
                functools.partial(caught_up, chain, value),
                timeout=300,
                what=f"the controller caught up after {count} Secrets",
            )
            wait_for(controller.idle, timeout=120, what="idle")
            rows.append((count, rss_mib(pid)))
            print(
                f"  {count:>6} unrelated Secrets: controller RSS {rows[-1][1]:.0f} MiB", flush=True
            )
        controller.stop()

    print(f"\ncontroller memory vs unrelated Secrets ({args.size} bytes of data each)")
    print(f"  {'Secrets':>8}  {'RSS MiB':>8}  {'their data MiB':>15}")
    for count, rss in rows:
        print(f"  {count:>8}  {rss:>8.0f}  {count * args.size / 2**20:>15.0f}")
    if len(rows) > 1 and rows[-1][0] > rows[0][0]:
        per = (rows[-1][1] - rows[0][1]) * 2**20 / (rows[-1][0] - rows[0][0])
        print(f"  growth: {per:.0f} bytes per Secret (its data: {args.size} bytes)")


if __name__ == "__main__":
    main()

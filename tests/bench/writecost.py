"""Benchmark: what each kind of write costs the API server, in its own CPU. Prints figures;
asserts nothing.

    KUBEBUILDER_ASSETS=... python -m tests.bench.writecost --count 2000

Why it exists: the controller's cold start is bound by the API server's CPU (``python -m
tests.bench.scale``), and three of a chain's six writes are status writes to custom resources.
This measures, for ``--count`` Routes written by a 16-thread client, the kube-apiserver CPU per
request of: a GET (the baseline a read-modify-write pays), a status written by server-side apply
(what rotator does), by JSON merge patch with a resourceVersion precondition (GET + PATCH) and
by PUT to ``/status`` (GET + PUT); then a Secret written by apply and created by POST. A write
type is only worth switching to if its figure, less the GET it needs, is lower.
"""

from __future__ import annotations

import argparse
import base64
import functools
from collections.abc import Callable
from typing import Any

from controllers import logs
from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.support import scale

THREADS = 16


def conditions(i: int, round_: int) -> list[dict[str, Any]]:
    """Three conditions whose messages change every round (so every write is a change)."""
    return [
        {
            "type": t,
            "status": "True",
            "reason": t,
            "message": f"{t} of route {i}, round {round_}",
            "lastTransitionTime": "2026-11-30T15:00:00Z",
            "observedGeneration": 1,
        }
        for t in ("Accepted", "ResolvedRefs", "Programmed")
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000, help="objects written per figure")
    args = parser.parse_args()
    logs.configure("text", "warning")
    fleet = scale.Fleet(args.count, 0)
    with LocalControlPlane(assets.find()) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig), pool_size=2 * THREADS))
        fleet.install(api)
        fleet.build_chains(api, THREADS)

        def where(i: int) -> tuple[str, str]:
            return f"r-{i:05d}", fleet.chain_namespace(i)

        def version(i: int) -> str:
            name, namespace = where(i)
            return str(
                api.get(rapi.ROUTES, name, namespace=namespace)["metadata"]["resourceVersion"]
            )

        def get(i: int) -> None:
            version(i)

        def status_body(i: int, round_: int, *, precondition: bool = False) -> dict[str, Any]:
            """Route i's status for ``round_``; with the resourceVersion read just before."""
            name, namespace = where(i)
            metadata = {"name": name, "namespace": namespace}
            if precondition:
                metadata["resourceVersion"] = version(i)
            return {
                "apiVersion": rapi.API_VERSION,
                "kind": "Route",
                "metadata": metadata,
                "status": {"conditions": conditions(i, round_)},
            }

        def applied(round_: int, i: int) -> None:
            body = status_body(i, round_)
            api.patch(rapi.ROUTES, body["metadata"]["name"], body,
                      namespace=body["metadata"]["namespace"],
                      patch_type=clients.PatchType.APPLY, field_manager="bench", force=True,
                      subresource="status")  # fmt: skip

        def merged(round_: int, i: int) -> None:
            body = status_body(i, round_, precondition=True)
            md = body["metadata"]
            patch = {
                "metadata": {"resourceVersion": md["resourceVersion"]},
                "status": body["status"],
            }
            api.patch(rapi.ROUTES, md["name"], patch, namespace=md["namespace"],
                      patch_type=clients.PatchType.MERGE, field_manager="bench",
                      subresource="status")  # fmt: skip

        def put(round_: int, i: int) -> None:
            api.replace(
                rapi.ROUTES, status_body(i, round_, precondition=True), subresource="status"
            )

        def secret(i: int, name: str) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": fleet.chain_namespace(i),
                             "labels": {rapi.MANAGED_BY_LABEL: rapi.MANAGED_BY}},
                "type": "Opaque",
                "data": {"apiKey": base64.b64encode(f"sk-{i:05d}".encode() * 8).decode()},
            }  # fmt: skip

        def secret_applied(i: int) -> None:
            body = secret(i, f"applied-{i:05d}")
            api.patch(objects.SECRETS, body["metadata"]["name"], body,
                      namespace=body["metadata"]["namespace"],
                      patch_type=clients.PatchType.APPLY, field_manager="bench", force=True)  # fmt: skip

        def secret_created(i: int) -> None:
            body = secret(i, f"created-{i:05d}")
            api.create(objects.SECRETS, body, namespace=body["metadata"]["namespace"])

        cases: list[tuple[str, Callable[[int], None]]] = [
            ("GET a Route", get),
            ("status by server-side apply", functools.partial(applied, 1)),
            ("status by server-side apply, again", functools.partial(applied, 2)),
            ("status by merge patch (GET + PATCH)", functools.partial(merged, 3)),
            ("status by PUT (GET + PUT)", functools.partial(put, 4)),
            ("Secret created by server-side apply", secret_applied),
            ("Secret created by POST", secret_created),
        ]
        print(f"\nkube-apiserver CPU per request, {args.count} objects, {THREADS} threads")
        for label, case in cases:
            before = scale.control_plane_cpu(cp)
            timing = scale.in_parallel(case, args.count, THREADS)
            used = scale.control_plane_cpu_since(cp, before)
            server, etcd = used.get("kube-apiserver", 0.0), used.get("etcd", 0.0)
            print(
                f"  {label:<40} {1000 * server / args.count:5.2f} ms "
                f"(etcd {1000 * etcd / args.count:4.2f} ms), {timing.rate:4.0f}/s"
            )


if __name__ == "__main__":
    main()

"""Benchmark: what one API request costs the controller's process, in its own CPU. Prints
figures; asserts nothing.

    KUBEBUILDER_ASSETS=... python -m tests.bench.requestcost --requests 3000 --rounds 3

Why it exists: a propagation update costs the controller about 10 ms of CPU at 10,000 chains
(``python -m tests.bench.scale``: 4 writes and a GET per update, and the watch events they
cause), on a machine whose two cores it shares with the API server. This measures the part
that is one request, against a local API server over TLS: a GET of a small Secret and a JSON
merge patch of it through :class:`controllers.runtime.client.Client`, and the same GET sent
straight to the urllib3 pool manager underneath it (the headers the client sends, with the
token read once; the body read whole and decoded by orjson, where the client streams it into a
bounded buffer). The difference is what the client adds, its body bound included; the rest is
urllib3, http.client and ssl. Rounds alternate the three, so a machine that slows down slows all of
them; the lowest and the median round are printed.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from collections.abc import Callable

import orjson
import urllib3

from controllers import logs
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.bench.figures import machine, row

NAMESPACE = "default"
NAME = "requestcost"


def cpu_per_call(call: Callable[[], object], count: int) -> float:
    """This process's CPU seconds per call of ``call``, over ``count`` calls in a row."""
    started = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000, help="requests per kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logs.configure("text", "warning")
    with LocalControlPlane(assets.find()) as cp:
        transport = restconfig.load(str(cp.kubeconfig), pool_size=4)
        api = clients.Client(transport)
        data = {"apiKey": base64.b64encode(b"k" * 40).decode()}
        api.create(objects.SECRETS, {"metadata": {"name": NAME}, "data": data}, namespace=NAMESPACE)
        url = f"{transport.configuration.host}/api/v1/namespaces/{NAMESPACE}/secrets/{NAME}"
        headers = {**transport.default_headers, "Accept": "application/json"}
        token = transport.configuration.get_api_key_with_prefix(
            "BearerToken", alias="authorization"
        )
        if token:
            headers["authorization"] = str(token)
        pool_manager = transport.rest_client.pool_manager
        patches = iter(range(1 << 30))

        def raw_get() -> object:
            response = pool_manager.request(
                "GET",
                url,
                headers=headers,
                timeout=urllib3.Timeout(total=30),
                preload_content=False,
            )
            body = response.read()
            response.release_conn()
            if response.status != 200:  # an error answered is not the request measured
                raise RuntimeError(f"GET {url}: HTTP {response.status}")
            return orjson.loads(body)

        kinds: dict[str, Callable[[], object]] = {
            "GET, rotator's client": lambda: api.get(objects.SECRETS, NAME, namespace=NAMESPACE),
            "GET, urllib3's pool manager underneath": raw_get,
            "merge PATCH, rotator's client": lambda: api.patch(
                objects.SECRETS,
                NAME,
                {"data": {"n": base64.b64encode(str(next(patches)).encode()).decode()}},
                namespace=NAMESPACE,
            ),
        }
        for call in kinds.values():  # connections made, code paths warm
            cpu_per_call(call, 100)
        rounds: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind, call in kinds.items():
                rounds[kind].append(cpu_per_call(call, args.requests))
    print(f"CPU per API request, {args.requests} requests a round, {args.rounds} rounds")
    print(f"machine: {machine()}")
    for kind, seconds in rounds.items():
        row(
            kind,
            f"lowest {min(seconds) * 1e6:.0f} µs, median {statistics.median(seconds) * 1e6:.0f} µs",
        )


if __name__ == "__main__":
    main()

"""A manager process with one ConfigMap controller, for tests of the runtime as a process.

The reconciler stamps every ConfigMap in the namespace with the identity of the process that
reconciled it first, so a test can see who reconciles. Run:
``python -m tests.support.toy_manager --kubeconfig K --namespace N --identity A [--leader-elect]``.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from controllers import logs
from controllers.runtime import client as clients
from controllers.runtime import errors, leaderelection, manager, objects, restconfig, sources
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result

STAMP = "test.rotator.dev/reconciled-by"


class Stamper:
    def __init__(self, api: clients.Client, store_get, identity: str) -> None:
        self._api = api
        self._get = store_get
        self._identity = identity

    def reconcile(self, request: Request) -> Result:
        obj = self._get(request.key)
        if obj is None:
            return Result()
        if (objects.meta(obj).get("annotations") or {}).get(STAMP):
            return Result()
        with contextlib.suppress(errors.NotFound):
            self._api.patch(
                objects.CONFIGMAPS,
                request.name,
                {"metadata": {"annotations": {STAMP: self._identity}}},
                namespace=request.namespace,
            )
        return Result()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--leader-elect", action="store_true")
    p.add_argument("--metrics-bind-address", default="127.0.0.1:0")
    p.add_argument("--health-probe-bind-address", default="127.0.0.1:0")
    args = p.parse_args()
    logs.configure("json", "debug")
    metrics = Metrics()
    api_client = restconfig.load(args.kubeconfig)
    api = clients.Client(api_client, metrics=metrics.for_requests("test"))
    election = (
        leaderelection.LeaderElectionOptions(
            name="toy-leader", namespace=args.namespace, identity=args.identity
        )
        if args.leader_elect
        else None
    )
    mgr = manager.Manager(
        api,
        manager.ManagerOptions(
            namespaces=(args.namespace,),
            metrics_bind_address=args.metrics_bind_address,
            health_probe_bind_address=args.health_probe_bind_address,
            leader_election=election,
            identity=args.identity,
        ),
        metrics=metrics,
    )
    informer = mgr.cache.informer(objects.CONFIGMAPS)
    controller = mgr.new_controller("stamper", Stamper(api, informer.store.get, args.identity))
    controller.watch(sources.Kind(informer))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return mgr.run(stop)


if __name__ == "__main__":
    sys.exit(main())

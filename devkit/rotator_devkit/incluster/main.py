"""Starts the stand-ins in a Pod: reads the cluster's service-account issuer from the API server
(in-cluster config; a kubeconfig in ``KUBECONFIG`` on a host), starts every stand-in where
:mod:`.settings` says, trusts that issuer, registers config/samples, serves the admin endpoint,
and runs until SIGTERM or SIGINT, then stops everything and exits 0."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from controllers.runtime import client as clients
from controllers.runtime import restconfig
from rotator_devkit.devenv.providers import ProviderStandIns
from rotator_devkit.incluster import cluster, samples, settings
from rotator_devkit.incluster.admin import AdminEndpoint

log = logging.getLogger("rotator_devkit.incluster")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        config = settings.Settings.from_environ(os.environ)
    except ValueError as exc:
        print(f"standins: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def stop_on(signum: int, _: FrameType | None) -> None:
        log.info("standins.stopping signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGINT, stop_on)
    api = clients.Client(restconfig.load())
    issuer, jwks = cluster.with_retries(lambda: cluster.service_account_issuer(api), timeout=60)
    standins = ProviderStandIns(
        config.state, lifetime=config.lifetime, placement=config.placement()
    )
    admin: AdminEndpoint | None = None
    try:
        standins.start()
        standins.trust_cluster(issuer, jwks)
        docs = samples.load(config.samples) if config.samples is not None else []
        standins.register_documents(docs)
        admin = AdminEndpoint(standins, samples=docs)
        admin.place((config.bind, config.port(settings.ADMIN)), config.public_host).start()
        log.info(
            "standins.ready issuer=%s lifetime=%ss admin=%s samples=%d",
            issuer,
            config.lifetime,
            admin.url,
            len(docs),
        )
        stop.wait()
    finally:
        if admin is not None:
            admin.stop()
        standins.stop()
    log.info("standins.stopped")
    return 0

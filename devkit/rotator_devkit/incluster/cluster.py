"""The cluster's service-account issuer, as its API server publishes it: the OIDC discovery
document (its ``issuer`` is whatever the API server's ``--service-account-issuer`` says) and the
JWKS that verifies the tokens it signs. Read with the Pod's own token and the cluster CA
(kubeadm binds ``system:service-account-issuer-discovery`` to every service account)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from controllers.runtime import client as clients

DISCOVERY = "/.well-known/openid-configuration"
JWKS = "/openid/v1/jwks"

log = logging.getLogger(__name__)
T = TypeVar("T")


def service_account_issuer(api: clients.Client) -> tuple[str, dict[str, Any]]:
    """The issuer the discovery document names, and the JWKS."""
    discovery = api.request("GET", DISCOVERY)
    issuer = discovery.get("issuer")
    if not isinstance(issuer, str) or not issuer:
        raise ValueError(f"the API server's {DISCOVERY} names no issuer")
    jwks = api.request("GET", JWKS, accept="application/jwk-set+json")
    if not isinstance(jwks.get("keys"), list) or not jwks["keys"]:
        raise ValueError(f"the API server's {JWKS} holds no keys")
    return issuer, dict(jwks)


def with_retries(
    read: Callable[[], T],
    *,
    timeout: float,
    monotonic: Callable[[], float] = time.monotonic,
    pause: Callable[[float], object] | None = None,
) -> T:
    """``read()``, tried again every second while it raises, until ``timeout`` seconds have
    passed (a Pod may start before its network is up); the last error then."""
    deadline = monotonic() + timeout
    while True:
        try:
            return read()
        except Exception as exc:
            if monotonic() >= deadline:
                raise
            log.warning("standins.cluster_unreachable: %s", type(exc).__name__)
            (pause or threading.Event().wait)(1.0)

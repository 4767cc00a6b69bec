"""The in-cluster stand-ins' admin endpoint: what tests ask of them, in JSON, over HTTP on the
``admin`` port (reached through the API server's service proxy or ``kubectl exec``; it serves
only the test cluster that runs it, and hands out the secrets it issued, for leak scans).

* ``GET /healthz`` — ``{"ok": true}`` once every stand-in serves (the readiness probe);
* ``GET /info`` — ``env`` (the controller's, as :meth:`ProviderStandIns.controller_env` says,
  with the files where the controller's container mounts them), ``caPEM``,
  ``podIdentityToken``, ``issuer`` (the cluster's, trusted), ``lifetime``, ``mount``;
* ``GET /calls`` — provider calls so far by ``<stand-in>.<action>``;
* ``GET /issued`` — ``{"values": [...]}``, every secret value handed out or registered;
* ``GET /samples`` — ``{"items": [...]}``: config/samples as registered at start (OIDC issuers
  pointed here, service-account keys this GCP trusts): what to apply;
* ``POST /register`` — ``{"policies": [...], "secrets": [...]}`` (BackendSecurityPolicy and
  Secret objects): what they name becomes known; answers the same lists as registered;
* ``POST /mode`` — ``{"standIn": "sts", "mode": "ok" | "fail" | "hang"}``, and with ``hang``
  an optional ``hangSeconds`` (at most 60, the default): each held call is answered after that
  long even if no ``ok`` comes (a test that cannot reach the endpoint again leaves no call held
  past a client's read timeout);
* ``GET /upstreams`` — every request the model API stand-ins received, by name (``openai``,
  ``bedrock``, ``azure-openai``, ``vertex-ai``): rows ``[at, path, verdict, credential]``, the
  credential a label, never its bytes (:meth:`ModelUpstream.label`);
* ``POST /accept`` — ``{"keys": [...]}``: the API keys the OpenAI stand-in accepts from now on
  (a key accepted before and not now is retired: a request with it is ``expired``);
* ``POST /lifetime`` — ``{"seconds": n}``: what the issuers mint from now on lives ``n`` s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from rotator_devkit.devenv.providers import ProviderStandIns
from rotator_devkit.devenv.standins.httpstub import Stub
from rotator_devkit.incluster import settings

MAX_HANG_SECONDS = 60
"""The longest a stand-in in ``hang`` mode holds a call (the default)."""


class AdminEndpoint(Stub):
    def __init__(self, standins: ProviderStandIns, *, samples: list[dict[str, Any]]) -> None:
        super().__init__()
        self.standins = standins
        self.samples = samples
        self._register_lock = threading.Lock()

    def info(self) -> dict[str, Any]:
        assert self.standins.ca_file is not None
        mount = Path(settings.MOUNT)
        return {
            "env": self.standins.controller_env(
                token_file=mount / settings.TOKEN_KEY, ca_file=mount / settings.CA_KEY
            ),
            "caPEM": self.standins.ca_file.read_text(),
            "podIdentityToken": self.standins.pod_identity_token,
            "issuer": self.standins.cluster_issuer,
            "lifetime": self.standins.lifetime,
            "mount": settings.MOUNT,
        }

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        """Registers ``policies`` reading ``secrets``; KeyError or TypeError if malformed."""
        policies = [p for p in body.get("policies") or [] if isinstance(p, dict)]
        secrets = [s for s in body.get("secrets") or [] if isinstance(s, dict)]
        for doc in policies:
            doc.setdefault("kind", "BackendSecurityPolicy")
        for doc in secrets:
            doc.setdefault("kind", "Secret")
        with self._register_lock:
            self.standins.register_documents([*secrets, *policies])
        return {"policies": policies, "secrets": secrets}

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        reads: dict[str, Callable[[], Any]] = {
            "/healthz": lambda: {"ok": True},
            "/info": self.info,
            "/calls": self.standins.calls,
            "/issued": lambda: {"values": sorted(self.standins.issued())},
            "/samples": lambda: {"items": self.samples},
            "/upstreams": lambda: {n: u.seen_json() for n, u in self.standins.upstreams().items()},
        }
        writes: dict[str, Callable[[dict[str, Any]], Any]] = {
            "/register": self.register,
            "/mode": self._mode,
            "/accept": self._accept,
            "/lifetime": self._lifetime,
        }
        self.answer_admin(handler, method, body, reads=reads, writes=writes)

    def _mode(self, request: dict[str, Any]) -> dict[str, Any]:
        stub = self.standins.stubs()[str(request["standIn"])]
        seconds = request.get("hangSeconds", MAX_HANG_SECONDS)
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not 0 < seconds <= MAX_HANG_SECONDS
        ):
            raise ValueError(f"hangSeconds is not a number of seconds in (0, {MAX_HANG_SECONDS}]")
        # set on every call: no hold outlives the test's ask
        stub.set_mode(str(request["mode"]), hang_seconds=float(seconds))
        return {"standIn": request["standIn"], "mode": stub.mode, "hangSeconds": stub.hang_seconds}

    def _accept(self, request: dict[str, Any]) -> dict[str, Any]:
        keys = request["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise TypeError("keys is not a list of non-empty strings")
        self.standins.openai.accept(*keys)
        return {"accepted": len(keys)}

    def _lifetime(self, request: dict[str, Any]) -> dict[str, Any]:
        seconds = request["seconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
            raise ValueError("seconds is not a positive whole number")
        self.standins.set_lifetime(seconds)
        return {"seconds": seconds}

"""Every version of the derived Secrets in a namespace, as an informer saw them: for proving
that each credential was replaced before it expired."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body
from tests.support.recording import LatestStates


@dataclass(frozen=True)
class Version:
    seen_at: float
    credential_hash: str
    expires_at: float | None
    issued_at: float | None = None


class SecretHistory(LatestStates):
    def __init__(self, api: clients.Client, namespace: str) -> None:
        self._lock = threading.Lock()
        self.versions: dict[str, list[Version]] = {}
        self._informer = Informer(
            api, objects.SECRETS, namespaces=[namespace], label_selector="rotator.dev/policy"
        )
        self._informer.add_handler(self)

    def __enter__(self) -> SecretHistory:
        self._informer.start()
        self._informer.wait_for_sync(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._informer.stop()

    def record(self, obj: Body) -> None:
        annotations = objects.meta(obj).get("annotations") or {}
        digest = annotations.get(rapi.CREDENTIAL_HASH_ANNOTATION, "")
        expires = annotations.get(rapi.EXPIRATION_ANNOTATION)
        issued = annotations.get(rapi.ISSUED_AT_ANNOTATION)
        policy = (objects.meta(obj).get("labels") or {}).get("rotator.dev/policy", "")
        with self._lock:
            versions = self.versions.setdefault(policy, [])
            if not versions or versions[-1].credential_hash != digest:
                versions.append(
                    Version(
                        time.time(),
                        digest,
                        clocks.parse_rfc3339(expires) if expires else None,
                        clocks.parse_rfc3339(issued) if issued else None,
                    )
                )

    def of(self, policy: str) -> list[Version]:
        with self._lock:
            return list(self.versions.get(policy, []))

    def count(self, policy: str) -> int:
        return len(self.of(policy))

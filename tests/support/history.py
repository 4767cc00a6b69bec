"""What rotator announced over time, as informers saw it: every version of the derived Secrets
in a namespace (each credential was replaced before it expired), and every renewal schedule a
policy's status announced."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.objects import Body
from tests.support.recording import WatchedStates


@dataclass(frozen=True)
class Version:
    seen_at: float
    credential_hash: str
    expires_at: float | None
    issued_at: float | None = None


class SecretHistory(WatchedStates):
    def __init__(self, api: clients.Client, namespace: str) -> None:
        self._lock = threading.Lock()
        self.versions: dict[str, list[Version]] = {}
        super().__init__(api, objects.SECRETS, namespace, label_selector="rotator.dev/policy")

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


class ScheduleHistory(WatchedStates):
    """Every (renewalTime, expirationTime) a policy's status announced, in order."""

    def __init__(self, api: clients.Client, namespace: str) -> None:
        self._lock = threading.Lock()
        self.announced: dict[str, list[tuple[float, float]]] = {}
        super().__init__(api, rapi.POLICIES, namespace)

    def record(self, obj: Body) -> None:
        status = obj.get("status") or {}
        if not status.get("renewalTime") or not status.get("expirationTime"):
            return
        pair = (
            clocks.parse_rfc3339(status["renewalTime"]),
            clocks.parse_rfc3339(status["expirationTime"]),
        )
        with self._lock:
            seen = self.announced.setdefault(objects.name(obj), [])
            if not seen or seen[-1] != pair:
                seen.append(pair)

    def of(self, name: str) -> list[tuple[float, float]]:
        with self._lock:
            return list(self.announced.get(name, []))

"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's ``leaderelection``).

Why not ``kubernetes.leaderelection``? It works on the client's model classes, reports loss only
through a callback on its own thread with no renew deadline distinct from the lease duration, and
has no metric. This is client-go's algorithm, on plain JSON:

* A candidate tries every ``retry_period`` (jittered) to take the Lease. It may take it when no one
  holds it, or when the holder's record has not changed for ``lease_duration`` as measured on the
  candidate's own monotonic clock (never by comparing wall clocks across machines).
* The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it has lost
  the lease and says so. The manager then exits the process, as controller-runtime does: a former
  leader that limps on could write alongside the new one.
* Every write is a compare-and-swap on ``resourceVersion``.
* On a graceful stop the leader releases the lease (empty holder) so a successor need not wait.

Defaults (15 s / 10 s / 2 s) are controller-runtime's.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from controllers.runtime import client as clients
from controllers.runtime import errors, objects

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LeaderElectionOptions:
    name: str
    """Name of the Lease."""
    namespace: str
    """Namespace of the Lease."""
    identity: str
    """This candidate's unique id (host name plus a random suffix)."""
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed change before taking over."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives up leadership."""
    retry_period: float = 2.0
    """Seconds between attempts to acquire or renew."""
    release_on_stop: bool = True
    """Release the Lease on a graceful stop. Defaults to True."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period")


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Runs the election loop; ``on_started`` when leading, ``on_lost`` when no longer."""

    def __init__(
        self,
        api: clients.Client,
        options: LeaderElectionOptions,
        *,
        on_started: Callable[[], None],
        on_lost: Callable[[], None],
        report: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self._api = api
        self._o = options
        self._on_started = on_started
        self._on_lost = on_lost
        self._report = report
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0  # monotonic time when _observed_spec last changed
        self._observed_version = ""
        self._leading = threading.Event()
        self._log = log.bind(lease=f"{options.namespace}/{options.name}", identity=options.identity)

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def run(self, stop: threading.Event) -> None:
        """Campaigns until leading, leads until the lease is lost or ``stop`` is set."""
        self._report(False)
        if not self._acquire(stop):
            return
        self._leading.set()
        self._log.info("leader.elected")
        try:
            self._on_started()
            self._report(True)  # after the controllers started: leading means working
            self._renew(stop)
        finally:
            self._leading.clear()
            self._report(False)
        if stop.is_set():
            if self._o.release_on_stop:
                self._release()
            return
        self._log.error("leader.lost", why=f"could not renew for {self._o.renew_deadline}s")
        self._on_lost()

    def _acquire(self, stop: threading.Event) -> bool:
        self._log.info("leader.campaigning")
        while not stop.is_set():
            if self._try_acquire_or_renew():
                return True
            stop.wait(self._o.retry_period * (1.0 + self._rng.uniform(0.0, 1.2)))
        return False

    def _renew(self, stop: threading.Event) -> None:
        last_renewed = time.monotonic()
        while not stop.wait(self._o.retry_period):
            if self._try_acquire_or_renew():
                last_renewed = time.monotonic()
                continue
            if time.monotonic() - last_renewed >= self._o.renew_deadline:
                return

    def _try_acquire_or_renew(self) -> bool:
        now = time.time()
        try:
            lease = self._api.get(objects.LEASES, self._o.name, namespace=self._o.namespace)
        except errors.NotFound:
            return self._create(now)
        except errors.ApiError as exc:
            self._log.warning("leader.read_failed", error=str(exc))
            return False
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        version = str(objects.meta(lease).get("resourceVersion", ""))
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = time.monotonic()
        self._observed_version = version
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self._o.lease_duration)
        if (
            holder
            and holder != self._o.identity
            and self._observed_at + duration > time.monotonic()
        ):
            return False  # someone else holds a live lease
        taking_over = holder != self._o.identity
        new_spec = dict(spec)
        new_spec.update(
            holderIdentity=self._o.identity,
            leaseDurationSeconds=int(self._o.lease_duration),
            renewTime=_micro_time(now),
        )
        if taking_over:
            new_spec["acquireTime"] = _micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if holder else 0
            )
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self._o.name,
                "namespace": self._o.namespace,
                "resourceVersion": version,
            },
            "spec": new_spec,
        }
        try:
            updated = self._api.replace(objects.LEASES, body)
        except errors.ApiError as exc:
            if not isinstance(exc, errors.Conflict):
                self._log.warning("leader.update_failed", error=str(exc))
            return False
        self._observe(updated)
        return True

    def _create(self, now: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._o.name, "namespace": self._o.namespace},
            "spec": {
                "holderIdentity": self._o.identity,
                "leaseDurationSeconds": int(self._o.lease_duration),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            created = self._api.create(objects.LEASES, body, namespace=self._o.namespace)
        except errors.ApiError as exc:
            if not isinstance(exc, errors.AlreadyExists):
                self._log.warning("leader.create_failed", error=str(exc))
            return False
        self._observe(created)
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observed_spec = dict(lease.get("spec") or {})
        self._observed_at = time.monotonic()
        self._observed_version = str(objects.meta(lease).get("resourceVersion", ""))

    def _release(self) -> None:
        if (
            self._observed_spec is None
            or self._observed_spec.get("holderIdentity") != self._o.identity
        ):
            return
        now = time.time()
        spec = dict(self._observed_spec)
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(now))
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self._o.name,
                "namespace": self._o.namespace,
                "resourceVersion": self._observed_version,
            },
            "spec": spec,
        }
        try:
            self._api.replace(objects.LEASES, body)
            self._log.info("leader.released")
        except errors.ApiError as exc:
            self._log.warning("leader.release_failed", error=str(exc))

"""The cache and the manager measure their waits on the injected clock, not the system's: a
clock that has run past the deadline ends a sync wait at once, long before its timeout passes
on the system clock."""

from __future__ import annotations

import threading
import time

from controllers.runtime import objects
from controllers.runtime.cache import Cache
from controllers.runtime.clock import FakeClock
from controllers.runtime.manager import EXIT_FAILED, Manager, ManagerOptions
from controllers.runtime.metrics import Metrics
from tests.support.fake_api import FakeTransport

HOUR = 3600.0
TIMEOUT = 5.0
"""Seconds of the system clock a wait on the system clock would take."""


class RunawayClock(FakeClock):
    """Jumps an hour forward at every monotonic read: any deadline is past at the next read."""

    def monotonic(self) -> float:
        self.advance(HOUR)
        return super().monotonic()


def test_the_cache_sync_wait_ends_on_the_injected_clock() -> None:
    cache = Cache(FakeTransport().client(), clock=RunawayClock())
    cache.informer(objects.CONFIGMAPS)  # never started, so never synced
    started = time.monotonic()
    assert not cache.wait_for_sync(TIMEOUT)
    assert time.monotonic() - started < TIMEOUT / 2, "the timeout ran out on the injected clock"


def test_the_manager_gives_up_on_sync_by_the_injected_clock() -> None:
    """The API answers every list with 404, so the cache never syncs; the manager's sync
    timeout runs out on its clock and the run fails."""
    options = ManagerOptions(
        metrics_bind_address="0", health_probe_bind_address="0", cache_sync_timeout=TIMEOUT
    )
    mgr = Manager(FakeTransport().client(), options, metrics=Metrics(), clock=RunawayClock())
    mgr.cache.informer(objects.CONFIGMAPS)
    started = time.monotonic()
    assert mgr.run(threading.Event()) == EXIT_FAILED
    assert time.monotonic() - started < TIMEOUT / 2, "the timeout ran out on the injected clock"

"""The time source for every timing decision in the runtime.

Injected into the work queue, the rate limiters and the schedule so that tests of timing logic run
on a :class:`FakeClock` instead of sleeping. Wall time (``now``) is what Kubernetes timestamps and
APScheduler speak; monotonic time is what durations and backoff are measured in.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Reads the time. Implementations must be safe to call from any thread."""

    def now(self) -> float:
        """Wall-clock seconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences are meaningful."""
        ...


class RealClock:
    """The system clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to; wall and monotonic time advance together."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += seconds
            self._mono += seconds


def to_datetime(epoch_seconds: float) -> datetime:
    """An aware UTC datetime for wall-clock seconds."""
    return datetime.fromtimestamp(epoch_seconds, tz=UTC)


def rfc3339(epoch_seconds: float) -> str:
    """Kubernetes' timestamp format (``metav1.Time``): second precision, ``Z`` suffix."""
    return to_datetime(epoch_seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    """Wall-clock seconds from an RFC 3339 timestamp as Kubernetes writes it."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def read_rfc3339(value: object, parse: Callable[[str], float] = parse_rfc3339) -> float | None:
    """Wall-clock seconds from a field that should hold an RFC 3339 timestamp (a Lease's
    ``renewTime``, ``acquireTime``, rotator's time annotations); None when it is not a string or
    does not read as a finite time (``parse`` refuses it, or it is beyond what a float or a
    date holds): the callers decide what a missing or unreadable time vouches for."""
    if not isinstance(value, str):
        return None
    try:
        seconds = parse(value)
    except (ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) else None

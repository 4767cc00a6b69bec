"""The live table ``rotator dev`` prints: every policy, its type, readiness, expiry, next renewal
and last rotation — reprinted whenever one of them changes (read from the manager's cache)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from controllers.reconcilers import conditions
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.objects import Body
from controllers.runtime.store import Store

COLUMNS = ("POLICY", "TYPE", "READY", "EXPIRES", "NEXT RENEWAL", "LAST ROTATION")


def _two_units(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


def human_duration(seconds: float) -> str:
    """A duration the way kubectl prints ages (``45s``, ``4m10s``, ``23h``, ``2d4h``), so the
    table reads like ``kubectl get``; a few lines rather than a dependency for it."""
    s = round(abs(seconds))
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        text = f"{s}s"
    elif m < 10:
        text = _two_units(m, "m", s % 60, "s")
    elif h < 3:
        text = f"{m}m"
    elif h < 8:
        text = _two_units(h, "h", m % 60, "m")
    elif h < 48:
        text = f"{h}h"
    else:
        text = _two_units(d, "d", h % 24, "h") if d < 8 else f"{d}d"
    return text


def _time(value: str | None, now: float) -> str:
    """Clock time (with the date when it is more than 12 hours away) and how far away it is."""
    if not value:
        return "-"
    at = clocks.parse_rfc3339(value)
    when = datetime.fromtimestamp(at, tz=UTC)
    stamp = when.strftime("%H:%M:%S" if abs(at - now) < 12 * 3600 else "%Y-%m-%d %H:%M")
    delta = at - now
    relative = f"in {human_duration(delta)}" if delta >= 0 else f"{human_duration(delta)} ago"
    return f"{stamp} ({relative})"


def row(policy: Mapping[str, Any], now: float) -> tuple[str, ...]:
    status = policy.get("status") or {}
    ready = conditions.of(policy, "Ready")
    readiness = f"{ready['status']} {ready['reason']}" if ready else "-"
    return (
        f"{objects.namespace(policy)}/{objects.name(policy)}",
        str((policy.get("spec") or {}).get("type", "")),
        readiness,
        _time(status.get("expirationTime"), now),
        _time(status.get("renewalTime"), now),
        _time(status.get("lastRotationTime"), now),
    )


def render(policies: list[Body], now: float) -> str:
    rows = [COLUMNS, *sorted(row(p, now) for p in policies)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%H:%M:%S")
    return f"\n── policies at {stamp} UTC " + "─" * 40 + "\n" + "\n".join(lines) + "\n"


class LiveTable:
    """Reprints the table (at most once a second) after any policy changes."""

    def __init__(self, store: Store, out: TextIO, *, clock: clocks.Clock | None = None) -> None:
        self._store = store
        self._out = out
        self._clock = clock or clocks.RealClock()
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="live-table", daemon=True)

    def on_add(self, obj: Body) -> None:
        self._changed.set()

    def on_update(self, old: Body, new: Body) -> None:
        if old is not new:  # resyncs change nothing
            self._changed.set()

    def on_delete(self, obj: Body) -> None:
        self._changed.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        self._thread.join(2)

    def _loop(self) -> None:
        while self._changed.wait() and not self._stop.is_set():
            self._stop.wait(1.0)  # let a burst of changes settle into one table
            self._changed.clear()
            self._out.write(render(self._store.items(), self._clock.now()))
            self._out.flush()

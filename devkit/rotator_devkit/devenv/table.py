"""The live table ``rotator dev`` prints: every policy, its type, readiness, expiry, next renewal
and last rotation — reprinted whenever one of them changes (read from the manager's cache) or a
gateway takes a new configuration into service — and, below it, each model of each gateway the
dev kit runs: its backend, when the gateway last took a new credential for it into service (its
last rotation, as traffic sees it), and the last request its stand-in accepted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from controllers.commands import humanize
from controllers.reconcilers import conditions
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.objects import Body
from controllers.runtime.store import Store

COLUMNS = ("POLICY", "TYPE", "READY", "EXPIRES", "NEXT RENEWAL", "LAST ROTATION")
GATEWAY_COLUMNS = ("GATEWAY", "MODEL", "BACKEND", "LAST ROTATION", "LAST REQUEST")


class GatewayRow(Protocol):
    """One model of a gateway (:class:`rotator_devkit.devenv.gateways.Row`)."""

    @property
    def gateway(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def rotated(self) -> float | None: ...
    @property
    def last_request(self) -> float | None: ...


GatewayRows = Callable[[], Sequence[GatewayRow]]


def _time(value: str | None, now: float) -> str:
    """Clock time (with the date when it is more than 12 hours away) and how far away it is."""
    if not value:
        return "-"
    at = clocks.parse_rfc3339(value)
    when = datetime.fromtimestamp(at, tz=UTC)
    stamp = when.strftime("%H:%M:%S" if abs(at - now) < 12 * 3600 else "%Y-%m-%d %H:%M")
    return f"{stamp} ({humanize.relative(at, now)})"


def _epoch(at: float | None, now: float) -> str:
    return "-" if at is None else _time(clocks.rfc3339(at), now)


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


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def render(
    policies: list[Body],
    now: float,
    gateways: Sequence[GatewayRow] | None = None,
) -> str:
    lines = _aligned([COLUMNS, *sorted(row(p, now) for p in policies)])
    if gateways:
        at = [
            (g.gateway, g.model, g.backend, _epoch(g.rotated, now), _epoch(g.last_request, now))
            for g in gateways
        ]
        lines += ["", *_aligned([GATEWAY_COLUMNS, *at])]
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%H:%M:%S")
    return f"\n── policies at {stamp} UTC " + "─" * 40 + "\n" + "\n".join(lines) + "\n"


class LiveTable:
    """Reprints the table (at most once a second) after any policy changes, or :meth:`refresh`."""

    def __init__(
        self,
        store: Store,
        out: TextIO,
        *,
        clock: clocks.Clock | None = None,
        gateways: GatewayRows | None = None,
    ) -> None:
        self._gateways = gateways
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

    def refresh(self) -> None:
        """Reprints the table soon (a gateway's rows changed)."""
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
            gateways = self._gateways() if self._gateways is not None else None
            self._out.write(render(self._store.items(), self._clock.now(), gateways))
            self._out.flush()

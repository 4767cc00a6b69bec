"""Times and tables for people: what ``rotator status`` and ``rotator renew`` print.

Pure functions of their inputs (the current time is passed in, read once from the injected
clock), so the exact text is unit-tested.
"""

from __future__ import annotations

from collections.abc import Sequence

from controllers.runtime import clock as clocks


def _two_units(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


def duration(seconds: float) -> str:
    """A duration as kubectl prints ages (apimachinery's ``HumanDuration``): ``45s``,
    ``4m10s``, ``41m``, ``3h15m``, ``23h``, ``2d4h``, ``30d`` — precise when near, coarse when
    far; whole units, truncated, as there. The sign is ignored: :func:`relative` says which
    way."""
    s = int(abs(seconds))
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
    elif d < 8:
        text = _two_units(d, "d", h % 24, "h")
    elif d < 365 * 2:
        text = f"{d}d"
    else:
        text = _two_units(d // 365, "y", d % 365, "d") if d < 365 * 8 else f"{d // 365}y"
    return text


def relative(at: float, now: float) -> str:
    """``in 41m`` for a time ahead, ``3m ago`` for one past, ``now`` within a second."""
    delta = at - now
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def timestamp(value: str | None, now: float) -> str:
    """An RFC 3339 timestamp as the API holds it, then how far it is: ``2026-11-29T12:41:00Z
    (in 41m)``; ``-`` when absent, the text as it is when it does not parse."""
    if not value:
        return "-"
    try:
        at = clocks.parse_rfc3339(value)
    except ValueError:
        return value
    return f"{value} ({relative(at, now)})"


def age(value: str | None, now: float) -> str:
    """How long ago an RFC 3339 timestamp was, as kubectl's AGE columns say it (``3m``); ``-``
    when absent or unreadable."""
    try:
        at = clocks.parse_rfc3339(value) if value else None
    except ValueError:
        at = None
    return "-" if at is None else duration(now - at)


def seconds(value: float) -> str:
    """A measured duration: ``0.8 s``, ``12.4 s``, ``3m5s`` past two minutes."""
    return f"{value:.1f} s" if value < 120 else duration(value)


def printable(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) written as ``\\xNN`` or
    ``\\uNNNN``: a value someone else wrote (a Lease's holder, an API error) reaches a terminal
    as what it says, not as escape sequences or line breaks that could forge another line
    (kubectl escapes terminal output for the same reason)."""
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def fields(rows: Sequence[tuple[str, str]], *, indent: int = 0) -> list[str]:
    """``label:  value`` lines with the values aligned (``kubectl describe``'s layout); a value
    of several lines goes on under its first."""
    width = max((len(label) for label, _ in rows), default=0) + 3  # the colon, two spaces
    pad = " " * indent
    lines = []
    for label, value in rows:
        first, *more = value.split("\n")
        lines.append(f"{pad}{(label + ':').ljust(width)}{first}".rstrip())
        lines += [f"{pad}{' ' * width}{line}".rstrip() for line in more]
    return lines


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: int = 2) -> list[str]:
    """Left-aligned columns two spaces apart under an upper-case header (``kubectl get``'s
    layout); the last column is not padded, so a long message only makes its own line long."""
    all_rows = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    pad = " " * indent
    return [
        pad + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in all_rows
    ]

"""Go-style durations (``1h30m``, ``90s``, ``1.5h``), the format Kubernetes APIs use.

The CRD's pattern guarantees the shape; this turns it into seconds.
"""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")


def parse(text: str) -> float:
    """Seconds in ``text``; raises ValueError for anything that is not a Go duration."""
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r}")
    return total

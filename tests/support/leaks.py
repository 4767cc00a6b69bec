"""Finding secret values where none may be: the controller's logs and metrics, Events, statuses.

A leak check is only as good as the values it looks for. Tests register their own (the Secrets
they write, :meth:`Chain.remember`), but most minted credentials never pass through a test's
hands, so the stand-ins that mint them register themselves here (:data:`MINTED`, from
tests/e2e/conftest.py): every token, secret key, session token and client secret they issued or
were given is looked for, in every scan, for the whole run.

Scanning must stay cheap on a debug log of many megabytes and thousands of values: the text is
cut into maximal runs of token characters (base64, base64url, JWT, hex), each distinct run is
looked at once, and a needle is looked up by its last :data:`KEY` characters at every position of
a run — linear in the distinct text, whatever the number of values. A needle that is short or has
other characters is searched for plainly.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

KEY = 12
RUN = re.compile(r"[A-Za-z0-9+/=._~-]+")
MIN_LENGTH = 8
"""Shorter values are not secrets worth the false alarms (``Chain.secret`` skips them too)."""


class Scanner:
    """Looks for values, and their base64, in texts; says where without saying what."""

    def __init__(self, values: Mapping[str, Iterable[str]]) -> None:
        """``values``: origin (a stand-in's name, ``test``) → its secret values."""
        self._origin: dict[str, tuple[str, str]] = {}  # needle → (origin, value)
        for origin, found in values.items():
            for value in found:
                if len(value) >= MIN_LENGTH:
                    for needle in (value, base64.b64encode(value.encode()).decode()):
                        self._origin.setdefault(needle, (origin, value))
        self._by_tail: dict[str, list[str]] = {}
        self._plain: list[str] = []
        for needle in self._origin:
            if len(needle) >= KEY and RUN.fullmatch(needle):
                self._by_tail.setdefault(needle[-KEY:], []).append(needle)
            else:
                self._plain.append(needle)

    def __len__(self) -> int:
        return len({value for _, value in self._origin.values()})

    def found(self, text: str) -> set[str]:
        """The needles in ``text``."""
        hits = {n for n in self._plain if n in text}
        for run in set(RUN.findall(text)):
            for end in range(KEY, len(run) + 1):
                for needle in self._by_tail.get(run[end - KEY : end], ()):
                    start = end - len(needle)
                    if start >= 0 and run.startswith(needle, start):
                        hits.add(needle)
        return hits

    def leaks(self, places: Mapping[str, str]) -> list[str]:
        """One line per value found in a place: its origin, its length, the place and, in a log
        of JSON lines, the event and field holding it — never the value."""
        found = []
        for place, text in places.items():
            for needle in sorted(self.found(text)):
                origin, value = self._origin[needle]
                how = "" if needle == value else " (base64)"
                found.append(
                    f"a secret value{how} of length {len(value)} from {origin} appears in the "
                    f"{place}{_where(text, needle)}"
                )
        return found


def _where(text: str, needle: str) -> str:
    """Where in a JSON-lines log the first occurrence is: the event's name and field."""
    at = text.find(needle)
    line = text[text.rfind("\n", 0, at) + 1 : (text.find("\n", at) + 1 or len(text) + 1) - 1]
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(record, dict):
        return ""
    fields = [str(k) for k, v in record.items() if needle in json.dumps(v)]
    return f" (event {record.get('event')!r}, field {', '.join(fields) or '?'})"


class Minted:
    """Origin → a snapshot of the secret values it issued so far (a stand-in's
    ``issued_values``, read at each scan); thread-safe."""

    def __init__(self) -> None:
        self._sources: dict[str, Callable[[], Iterable[str]]] = {}
        self._lock = threading.Lock()

    def add_source(self, origin: str, issued: Callable[[], Iterable[str]]) -> None:
        with self._lock:
            self._sources[origin] = issued

    def values(self) -> dict[str, set[str]]:
        with self._lock:
            sources = dict(self._sources)
        return {origin: set(issued()) for origin, issued in sources.items()}


MINTED = Minted()
"""The run's registry: the e2e stand-in fixtures add themselves; every :meth:`Chain.leaks`
looks for these values besides the chain's own."""


class LogTail:
    """What log files gained since the last look, whole lines only (a line being written is
    left for the next look), so that a scan after each test reads each byte once."""

    def __init__(self) -> None:
        self._offsets: dict[Path, int] = {}

    def new_text(self, paths: Iterable[Path]) -> str:
        parts = []
        for path in sorted(paths):
            start = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end:
                parts.append(data[:end].decode(errors="replace"))
                self._offsets[path] = start + end
        return "".join(parts)

"""The credential value: what a provider mints and what rotator writes to a derived Secret."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Credential:
    """Secret data (key → value) and when it stops working (epoch seconds; None = never).

    ``state`` is what a provider must remember between rotations (an IAM key still retiring),
    never secret; the controller stores it next to the data. ``repr`` never shows the data, so a
    credential in a log line or a traceback leaks nothing.
    """

    data: Mapping[str, bytes] = field(repr=False)
    expires_at: float | None = None
    issued_at: float | None = None
    state: Mapping[str, str] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """A stable SHA-256 over the data, for the ``rotator.dev/credential-hash`` annotation."""
        return content_hash(self.data)

    def __repr__(self) -> str:
        return (
            f"Credential(keys={sorted(self.data)}, expires_at={self.expires_at}, "
            f"hash={self.content_hash[:12]})"
        )


def content_hash(data: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(data[key]).digest())
    return digest.hexdigest()

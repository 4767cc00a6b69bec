"""Which shard an object belongs to, computed exactly as the API server computes it for a
server-side sharded list or watch (KEP-5866, the ``ShardedListAndWatch`` feature gate, alpha in
Kubernetes v1.36): so that a replica filtering on its own side (a server without the gate) and
one whose server filters agree on every object.

The API server's rule (``k8s.io/apimachinery/pkg/sharding``, v0.36.3): the field's value is
hashed with 64-bit FNV-1a, written as ``0x`` and 16 lower-case hex digits, and an object is in
``shardRange(field, start, end)`` when ``start <= hash < end`` (hex strings of 16 digits, the
end may be ``0x10000000000000000``, 2**64). A selector is one range or several joined by
``||``; a list the server filtered echoes the selector in ``metadata.shardInfo.selector``, and a
server without the gate ignores the parameter and returns everything.

rotator shards by namespace: every reference in a chain stays inside its namespace, so a shard
never splits a chain. ``N`` shards are ``N`` ranges of equal width, the ``i``-th starting at
``floor(i * 2**64 / N)``.

FNV-1a is written here (a dozen lines): the standard library has no FNV, and the function must be
bit-for-bit the API server's, which a test checks against a real API server.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SPACE = 1 << 64
"""The hash space: every 64-bit value, ``[0, 2**64)``."""
NAMESPACE_FIELD = "object.metadata.namespace"
"""The field rotator shards by (the API server also allows ``object.metadata.uid``)."""
_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = SPACE - 1
MAX_SHARDS = 1024
"""More shards than any cluster needs; a bound, so a typo cannot ask for a million Leases."""


def fnv1a64(value: str) -> int:
    """64-bit FNV-1a of ``value``'s UTF-8 bytes (Go's ``hash/fnv.New64a`` over ``[]byte(s)``)."""
    h = _OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _PRIME) & _MASK
    return h


def hex64(value: int) -> str:
    """A bound as the API server writes and compares it: ``0x`` and 16 hex digits, or
    ``0x10000000000000000`` for the end of the space."""
    return f"0x{value:016x}"


@dataclass(frozen=True)
class ShardRange:
    """One shard: the hashes ``start <= h < end``."""

    index: int
    start: int
    end: int

    def holds(self, namespace: str) -> bool:
        return self.start <= fnv1a64(namespace) < self.end

    def selector(self, field: str = NAMESPACE_FIELD) -> str:
        """The ``shardSelector`` term of this range."""
        return f"shardRange({field}, '{hex64(self.start)}', '{hex64(self.end)}')"


def ranges(shards: int) -> tuple[ShardRange, ...]:
    """The ``shards`` equal ranges covering the whole space, in order."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, got {shards}")
    bounds = [i * SPACE // shards for i in range(shards)] + [SPACE]
    return tuple(ShardRange(i, bounds[i], bounds[i + 1]) for i in range(shards))


def shard_of(namespace: str, shards: int) -> int:
    """The index of the shard that holds ``namespace`` among ``shards`` equal ranges."""
    return shard_of_hash(fnv1a64(namespace), shards)


def shard_of_hash(h: int, shards: int) -> int:
    """The index of the range of :func:`ranges` that holds the hash ``h``."""
    # the range i holds h when floor(i * 2**64 / n) <= h < floor((i + 1) * 2**64 / n); the
    # candidate below is that i or one more, and the exact bounds decide
    i = h * shards // SPACE
    return i if h < (i + 1) * SPACE // shards else i + 1


def merged(owned: Iterable[ShardRange]) -> list[tuple[int, int]]:
    """Adjacent owned ranges joined: the fewest ``(start, end)`` intervals that cover them."""
    out: list[tuple[int, int]] = []
    for r in sorted(owned, key=lambda r: r.start):
        if out and out[-1][1] == r.start:
            out[-1] = (out[-1][0], r.end)
        else:
            out.append((r.start, r.end))
    return out


def selector(owned: Sequence[ShardRange], field: str = NAMESPACE_FIELD) -> str:
    """One ``shardSelector`` for several shards: their merged ranges joined by ``||``."""
    if not owned:
        raise ValueError("a selector needs at least one shard")
    return " || ".join(
        f"shardRange({field}, '{hex64(start)}', '{hex64(end)}')" for start, end in merged(owned)
    )


@functools.lru_cache(maxsize=65536)
def _namespace_hash(namespace: str) -> int:
    """:func:`fnv1a64` of a namespace, remembered: a cache filtering client-side hashes the
    namespace of every object it lists or is told of, and namespaces repeat."""
    return fnv1a64(namespace)


@dataclass(frozen=True)
class ShardFilter:
    """The objects of some shards: the ``shardSelector`` an informer sends, and the same test
    on its own side for a server that ignores the selector (no ``shardInfo`` in its answer)."""

    owned: tuple[ShardRange, ...]

    @property
    def selector(self) -> str:
        return selector(self.owned)

    def holds(self, namespace: str) -> bool:
        h = _namespace_hash(namespace)
        return any(r.start <= h < r.end for r in self.owned)

"""The shard arithmetic (controllers/runtime/sharding.py): FNV-1a-64 as Go's hash/fnv computes
it, ``N`` equal ranges that cover the hash space with no gap or overlap, the selector text the
API server parses, and the shard of a namespace. tests/e2e/test_sharding.py checks the same
function against a real API server."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime import sharding


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", 0xCBF29CE484222325),  # the offset basis
        ("a", 0xAF63DC4C8601EC8C),  # FNV's published test vectors (64-bit FNV-1a)
        ("foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a64_matches_the_published_vectors(value: str, expected: int) -> None:
    """Break: FNV-1 (multiply, then xor) gives 0xaf63bd4c8601b7be for "a"."""
    assert sharding.fnv1a64(value) == expected


def test_ranges_match_the_api_servers_own_examples() -> None:
    """k8s.io/apimachinery's ListOptions.ShardSelector documents the 2- and 4-shard splits;
    break: any other rounding of the bounds."""
    two = [s.selector() for s in sharding.ranges(2)]
    field = sharding.NAMESPACE_FIELD
    assert two == [
        f"shardRange({field}, '0x0000000000000000', '0x8000000000000000')",
        f"shardRange({field}, '0x8000000000000000', '0x10000000000000000')",
    ]
    four = [(s.start, s.end) for s in sharding.ranges(4)]
    assert four == [(0, 1 << 62), (1 << 62, 1 << 63), (1 << 63, 3 << 62), (3 << 62, 1 << 64)]
    # an N that does not divide 2**64: the i-th bound is floor(i * 2**64 / N)
    assert [s.start for s in sharding.ranges(3)] == [0, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA]


@given(st.integers(1, sharding.MAX_SHARDS))
def test_ranges_cover_the_space_with_no_gap_or_overlap(n: int) -> None:
    shards = sharding.ranges(n)
    assert shards[0].start == 0
    assert shards[-1].end == sharding.SPACE
    assert all(a.end == b.start for a, b in itertools.pairwise(shards))
    widths = {s.end - s.start for s in shards}
    assert max(widths) - min(widths) <= 1


@given(st.text(max_size=63), st.integers(1, sharding.MAX_SHARDS))
def test_the_shard_of_a_namespace_is_the_range_that_holds_its_hash(ns: str, n: int) -> None:
    """Break: ``shard_of`` as the range's ``holds`` by another rule (FNV-1, the name's bytes
    in another encoding)."""
    holders = [s.index for s in sharding.ranges(n) if s.holds(ns)]
    assert holders == [sharding.shard_of(ns, n)]


def test_a_hash_on_a_bound_belongs_to_the_range_it_starts() -> None:
    """The hash equal to a range's start is in that range, and its end is not
    (``start <= h < end``), including bounds floor(i * 2**64 / N) rounded down. Break:
    ``shard_of_hash`` as ``h * n // 2**64`` alone (one range too low just past a rounded
    bound)."""
    for n in (3, 7, 1000):
        for shard in sharding.ranges(n):
            for h in (shard.start, shard.end - 1):
                assert sharding.shard_of_hash(h, n) == shard.index, (n, shard, h)


def test_the_selector_of_several_shards_merges_adjacent_ranges() -> None:
    seven = sharding.ranges(7)
    field = sharding.NAMESPACE_FIELD
    one = sharding.selector([seven[3], seven[2]])
    assert one == seven[2].selector().replace(
        sharding.hex64(seven[2].end), sharding.hex64(seven[3].end)
    )
    two = sharding.selector([seven[0], seven[5]])
    assert two == f"{seven[0].selector(field)} || {seven[5].selector(field)}"
    every = sharding.selector(seven)
    assert every == f"shardRange({field}, '0x0000000000000000', '0x10000000000000000')"


@pytest.mark.parametrize("n", [0, -1, sharding.MAX_SHARDS + 1])
def test_a_shard_count_out_of_bounds_is_refused(n: int) -> None:
    with pytest.raises(ValueError, match="shards must be between 1 and"):
        sharding.ranges(n)


def test_a_selector_needs_a_shard() -> None:
    with pytest.raises(ValueError, match="at least one shard"):
        sharding.selector([])

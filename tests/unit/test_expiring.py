"""The bounded, expiring, one-load-per-key cache behind the metrics endpoint's review verdicts
and the OIDC tokens and discovery documents: its failure memory, its bounded wait, and that it
stays a leaf both layers may import."""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from controllers.runtime.clock import FakeClock
from rotator import expiring
from rotator.expiring import ExpiringCache, FailureBackoff, StillFailing, WaitTimedOut


def loader(calls: list[str], key: str, value: str, ttl: float) -> Callable[[], tuple[str, float]]:
    def load() -> tuple[str, float]:
        calls.append(key)
        return value, ttl

    return load


def constant(value: int) -> Callable[[], tuple[int, float]]:
    return lambda: (value, 60.0)


def test_a_value_is_reused_until_its_ttl_then_loaded_again() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(8, monotonic=clock.monotonic)
    calls: list[str] = []
    assert cache.get_or_load("a", loader(calls, "a", "one", 30)) == "one"
    clock.advance(29.9)
    assert cache.get_or_load("a", loader(calls, "a", "two", 30)) == "one"
    clock.advance(0.1)
    assert cache.get_or_load("a", loader(calls, "a", "two", 30)) == "two"
    assert calls == ["a", "a"]


def test_each_load_sets_its_own_ttl_and_zero_means_do_not_keep() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(8, monotonic=clock.monotonic)
    calls: list[str] = []
    cache.get_or_load("deny", loader(calls, "deny", "no", 30))
    cache.get_or_load("allow", loader(calls, "allow", "yes", 300))
    cache.get_or_load("once", loader(calls, "once", "x", 0))
    cache.get_or_load("once", loader(calls, "once", "x", 0))
    clock.advance(31)
    cache.get_or_load("deny", loader(calls, "deny", "no", 30))
    cache.get_or_load("allow", loader(calls, "allow", "yes", 300))
    assert calls == ["deny", "allow", "once", "once", "deny"]


def test_the_least_recently_used_entry_goes_first_when_full() -> None:
    cache: ExpiringCache[str, str] = ExpiringCache(2, monotonic=FakeClock().monotonic)
    calls: list[str] = []
    for key in ("a", "b", "a", "c"):  # a is used again after b: b is the least recent
        cache.get_or_load(key, loader(calls, key, key, 60))
    assert len(cache) == 2
    for key in ("a", "c", "b"):
        cache.get_or_load(key, loader(calls, key, key, 60))
    assert calls == ["a", "b", "c", "b"]


def test_a_flood_of_distinct_keys_never_holds_more_than_the_bound() -> None:
    cache: ExpiringCache[int, int] = ExpiringCache(16, monotonic=FakeClock().monotonic)
    for i in range(1000):
        cache.get_or_load(i, constant(i))
        assert len(cache) <= 16


def test_a_failed_load_is_not_kept() -> None:
    cache: ExpiringCache[str, str] = ExpiringCache(8, monotonic=FakeClock().monotonic)

    def fail() -> tuple[str, float]:
        raise ConnectionError("api server down")

    with pytest.raises(ConnectionError):
        cache.get_or_load("a", fail)
    calls: list[str] = []
    assert cache.get_or_load("a", loader(calls, "a", "up", 60)) == "up"
    assert calls == ["a"]


class Key:
    """A key that reports when the cache compares another equal key with it: the moment a second
    caller, under the cache's lock, finds the first caller's load in flight."""

    def __init__(self, name: str, compared: threading.Event) -> None:
        self.name = name
        self.compared = compared

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        self.compared.set()
        return isinstance(other, Key) and other.name == self.name


@pytest.mark.parametrize("fails", [False, True], ids=["value", "error"])
def test_callers_of_a_key_being_loaded_wait_for_that_one_load(fails: bool) -> None:
    cache: ExpiringCache[Key, str] = ExpiringCache(8, monotonic=FakeClock().monotonic)
    compared, started, release = threading.Event(), threading.Event(), threading.Event()
    loads: list[str] = []
    results: dict[str, object] = {}

    def slow_load() -> tuple[str, float]:
        loads.append("first")
        started.set()
        assert release.wait(10)
        if fails:
            raise ConnectionError("review failed")
        return "verdict", 0.0  # not kept: only the shared flight can spare the second load

    def call(name: str, load: Callable[[], tuple[str, float]]) -> None:
        try:
            results[name] = cache.get_or_load(Key("token", compared), load)
        except ConnectionError as exc:
            results[name] = exc

    first = threading.Thread(target=call, args=("first", slow_load))
    first.start()
    assert started.wait(10)
    compared.clear()
    second = threading.Thread(target=call, args=("second", loader(loads, "second", "other", 0)))
    second.start()
    assert compared.wait(10)  # the second caller has found the load in flight
    release.set()
    first.join(10)
    second.join(10)
    assert loads == ["first"]
    if fails:
        assert isinstance(results["first"], ConnectionError)
        assert results["second"] is results["first"]
    else:
        assert results == {"first": "verdict", "second": "verdict"}


def fail(error: Exception) -> Callable[[], tuple[str, float]]:
    def load() -> tuple[str, float]:
        raise error

    return load


def test_a_remembered_failure_is_raised_until_its_backoff_passes_and_the_backoff_grows() -> None:
    """Mutations caught: failures not remembered, the backoff not doubling, a success not
    forgetting the failure count."""
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(
        8, monotonic=clock.monotonic, failures=FailureBackoff(first=5, cap=60)
    )
    down = ConnectionError("issuer down")
    with pytest.raises(ConnectionError):
        cache.get_or_load("a", fail(down))
    with pytest.raises(StillFailing) as raised:
        cache.get_or_load("a", loader([], "a", "never", 60))
    assert raised.value.error is down
    assert raised.value.retry_in == pytest.approx(5)
    clock.advance(5)
    with pytest.raises(ConnectionError):
        cache.get_or_load("a", fail(down))  # the second failure in a row: 10 s
    clock.advance(9.9)
    with pytest.raises(StillFailing):
        cache.get_or_load("a", loader([], "a", "never", 60))
    clock.advance(0.1)
    assert cache.get_or_load("a", loader([], "a", "up", 0)) == "up"
    with pytest.raises(ConnectionError):
        cache.get_or_load("a", fail(down))
    with pytest.raises(StillFailing) as again:
        cache.get_or_load("a", loader([], "a", "never", 60))
    assert again.value.retry_in == pytest.approx(5), "the success reset the count"


def test_only_the_failures_asked_for_are_remembered() -> None:
    cache: ExpiringCache[str, str] = ExpiringCache(
        8, failures=FailureBackoff(first=5, cap=60, remember=(ConnectionError,))
    )
    with pytest.raises(KeyError):
        cache.get_or_load("a", fail(KeyError("a bug")))
    assert cache.get_or_load("a", loader([], "a", "up", 60)) == "up"


def inner_down() -> tuple[ExpiringCache[str, str], ExpiringCache[str, str], ConnectionError]:
    """Two caches on one backoff (an issuer's discovery, its tokens), the inner one remembering
    the failure of key ``issuer``: that failure is the third."""
    backoff = FailureBackoff(first=5, cap=60)
    inner: ExpiringCache[str, str] = ExpiringCache(8, failures=backoff)
    outer: ExpiringCache[str, str] = ExpiringCache(8, failures=backoff)
    down = ConnectionError("discovery failed")
    with pytest.raises(ConnectionError):
        inner.get_or_load("issuer", fail(down))
    return inner, outer, down


def test_a_load_failing_on_another_keys_memory_is_remembered_as_that_failure() -> None:
    """A token fetch that fails because its issuer's discovery is still failing keeps the
    discovery's error, not a wrapper of a wrapper."""
    inner, outer, down = inner_down()

    def via_inner() -> tuple[str, float]:
        return inner.get_or_load("issuer", loader([], "issuer", "never", 60)), 60

    with pytest.raises(StillFailing):
        outer.get_or_load("token", via_inner)
    with pytest.raises(StillFailing) as raised:
        outer.get_or_load("token", loader([], "token", "never", 60))
    assert raised.value.error is down


def test_a_load_failing_with_a_translation_of_another_keys_failure_remembers_the_original() -> None:
    """A caller that turns StillFailing into its own error (a note added) before the outer cache
    sees it: the outer cache keeps the inner failure, not the annotated one, so a later caller's
    note is added to the original message once. Mutation caught: storing the translation."""
    inner, outer, down = inner_down()

    def via_inner() -> tuple[str, float]:
        try:
            return inner.get_or_load("issuer", loader([], "issuer", "never", 60)), 60
        except StillFailing as still:
            raise expiring.translated(ConnectionError(f"{still}; noted"), still) from None

    with pytest.raises(ConnectionError, match=r"discovery failed; noted$"):
        outer.get_or_load("token", via_inner)
    with pytest.raises(StillFailing) as raised:
        outer.get_or_load("token", loader([], "token", "never", 60))
    assert raised.value.error is down


def in_flight(cache: ExpiringCache[str, str], key: str) -> threading.Event:
    """Starts a load of ``key`` that lasts until the returned event is set."""
    started, release = threading.Event(), threading.Event()

    def slow() -> tuple[str, float]:
        started.set()
        assert release.wait(10)
        return "late", 60

    threading.Thread(target=lambda: cache.get_or_load(key, slow), daemon=True).start()
    assert started.wait(10)
    return release


def test_a_caller_waits_for_another_load_at_most_its_wait() -> None:
    cache: ExpiringCache[str, str] = ExpiringCache(8)
    release = in_flight(cache, "a")
    try:
        with pytest.raises(WaitTimedOut):
            cache.get_or_load("a", loader([], "a", "never", 60), wait=0.05)
    finally:
        release.set()


def test_callers_do_not_queue_behind_the_retry_of_a_failing_key() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(
        8, monotonic=clock.monotonic, failures=FailureBackoff(first=5, cap=60)
    )
    with pytest.raises(ConnectionError):
        cache.get_or_load("a", fail(ConnectionError("down")))
    clock.advance(5)
    release = in_flight(cache, "a")  # the retry
    try:
        with pytest.raises(StillFailing) as raised:
            cache.get_or_load("a", loader([], "a", "never", 60))  # no wait: it would block
        assert raised.value.retrying
    finally:
        release.set()


def test_the_shared_cache_imports_only_the_standard_library() -> None:
    """Both layers import it (the import-linter contract's one exception): an import of anything
    else would carry the engine into the runtime, or a library into both."""
    tree = ast.parse(Path(expiring.__file__).read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    roots = {name.split(".")[0] for name in imported}
    assert roots - {"__future__"} <= set(sys.stdlib_module_names), roots

"""The bounded, expiring, one-load-per-key cache behind the metrics endpoint's review verdicts."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from controllers.runtime.clock import FakeClock
from controllers.runtime.expiring import ExpiringCache


def loader(calls: list[str], key: str, value: str, ttl: float) -> Callable[[], tuple[str, float]]:
    def load() -> tuple[str, float]:
        calls.append(key)
        return value, ttl

    return load


def constant(value: int) -> Callable[[], tuple[int, float]]:
    return lambda: (value, 60.0)


def test_a_value_is_reused_until_its_ttl_then_loaded_again() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(8, clock=clock)
    calls: list[str] = []
    assert cache.get_or_load("a", loader(calls, "a", "one", 30)) == "one"
    clock.advance(29.9)
    assert cache.get_or_load("a", loader(calls, "a", "two", 30)) == "one"
    clock.advance(0.1)
    assert cache.get_or_load("a", loader(calls, "a", "two", 30)) == "two"
    assert calls == ["a", "a"]


def test_each_load_sets_its_own_ttl_and_zero_means_do_not_keep() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, str] = ExpiringCache(8, clock=clock)
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
    cache: ExpiringCache[str, str] = ExpiringCache(2, clock=FakeClock())
    calls: list[str] = []
    for key in ("a", "b", "a", "c"):  # a is used again after b: b is the least recent
        cache.get_or_load(key, loader(calls, key, key, 60))
    assert len(cache) == 2
    for key in ("a", "c", "b"):
        cache.get_or_load(key, loader(calls, key, key, 60))
    assert calls == ["a", "b", "c", "b"]


def test_a_flood_of_distinct_keys_never_holds_more_than_the_bound() -> None:
    cache: ExpiringCache[int, int] = ExpiringCache(16, clock=FakeClock())
    for i in range(1000):
        cache.get_or_load(i, constant(i))
        assert len(cache) <= 16


def test_a_failed_load_is_not_kept() -> None:
    cache: ExpiringCache[str, str] = ExpiringCache(8, clock=FakeClock())

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
    cache: ExpiringCache[Key, str] = ExpiringCache(8, clock=FakeClock())
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

"""RollingGateway's bookkeeping, with stand-ins for LiteLLM's zygote and proxies (no process
starts): a roll is never lost, a failed start is tried again until it serves, every proxy is
stopped by stop(), and requests in flight are counted per proxy, not per port."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rotator_devkit.devenv import gateway
from tests.support.polling import wait_for


class World:
    made: ClassVar[list[FakeProxy]] = []
    failing: ClassVar[set[str]] = set()
    """Configuration texts whose proxies never complete a chat (a model API failing)."""


class FakeZygote:
    def __init__(self, **_: Any) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


class FakeProxy:
    def __init__(self, zygote: FakeZygote, config: Path, *, master_key: str, config_text: str):
        self.port = 4242  # every proxy on the same port: a port may be reused
        self.config_text = config_text
        self.alive = True
        World.made.append(self)

    def running(self) -> bool:
        return self.alive

    def wait_ready(self) -> None:
        pass

    def wait_completing(self, models: list[str], *, cancel: threading.Event | None = None) -> None:
        if self.config_text in World.failing:
            raise TimeoutError(f"no completion of {models}")

    def stop(self, timeout: float = 30.0) -> None:
        self.alive = False


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    World.made, World.failing = [], set()
    monkeypatch.setattr(gateway, "Zygote", FakeZygote)
    monkeypatch.setattr(gateway, "LiteLLMProxy", FakeProxy)


def serving(gw: gateway.RollingGateway) -> str | None:
    return gw.current.config_text if gw.current is not None else None


def make(
    tmp_path: Path, cls: type[gateway.RollingGateway] = gateway.RollingGateway, **kw: Any
) -> gateway.RollingGateway:
    return cls(tmp_path, master_key="k", ready_models=lambda _: ["m"], **kw)


def test_a_roll_while_the_starter_thread_is_finishing_is_not_lost(tmp_path: Path) -> None:
    class Paused(gateway.RollingGateway):
        """Its first starter thread stays alive a while after finding nothing pending."""

        returned, resume = threading.Event(), threading.Event()

        def _start_pending(self) -> None:
            super()._start_pending()
            if not Paused.returned.is_set():
                Paused.returned.set()
                Paused.resume.wait(10)

    gw = make(tmp_path, Paused)
    try:
        gw.roll("A", wait=False)
        wait_for(Paused.returned.is_set, timeout=10, what="the starter found nothing pending")
        gw.roll("B", wait=False)
        Paused.resume.set()
        wait_for(lambda: serving(gw) == "B", timeout=10, what="B serving")
    finally:
        Paused.resume.set()
        gw.stop(wait=1)


def test_a_failed_start_is_tried_again_until_it_serves(tmp_path: Path) -> None:
    gw = make(tmp_path, retry_delay=0.01, retry_max=0.05)
    try:
        gw.roll("A")
        assert serving(gw) == "A"
        World.failing.add("B")
        gw.roll("B", wait=False)
        wait_for(lambda: len(gw.errors) >= 2, timeout=10, what="B failing, and tried again")
        assert serving(gw) == "A", "the old proxy serves meanwhile"
        World.failing.clear()  # the model API healed
        wait_for(lambda: serving(gw) == "B", timeout=10, what="B serving after the heal")
        failed = [p for p in World.made if p.config_text == "B"][:-1]
        assert failed, "B failed at least once"
        assert not any(p.alive for p in failed), "each failed start stopped"
    finally:
        gw.stop(wait=1)


def test_a_newer_configuration_replaces_a_failing_one_and_stop_ends_the_retries(
    tmp_path: Path,
) -> None:
    gw = make(tmp_path, retry_delay=0.01, retry_max=0.05)
    gw.roll("A")
    World.failing.add("B")
    gw.roll("B", wait=False)
    wait_for(lambda: gw.errors, timeout=10, what="B failing")
    gw.roll("C", wait=False)
    wait_for(lambda: serving(gw) == "C", timeout=10, what="C serving")
    World.failing.add("D")
    gw.roll("D", wait=False)
    wait_for(lambda: any("start" in e for e in gw.errors[1:]), timeout=10, what="D failing")
    gw.stop(wait=1)
    assert gw._starter is not None
    starter = gw._starter
    wait_for(lambda: not starter.is_alive(), timeout=10, what="no more retries")
    assert not any(p.alive for p in World.made)


def test_stop_stops_every_proxy_including_those_still_draining(tmp_path: Path) -> None:
    gw = make(tmp_path, drain_timeout=600)
    gw.roll("A")
    old = gw.enter()  # a request in flight on A: A drains for up to 600 s
    assert old is not None
    gw.roll("B")
    assert serving(gw) == "B"
    assert old.running(), "A drains"
    try:
        gw.stop(wait=0.1)
        assert not any(p.running() for p in World.made), "no proxy left running"
        assert gw.running() == []
    finally:
        gw.leave(old)  # its retirement ends


def test_requests_in_flight_are_counted_per_proxy_not_per_port(tmp_path: Path) -> None:
    gw = make(tmp_path, drain_timeout=600)
    try:
        gw.roll("A")
        old = gw.enter()
        assert old is not None
        gw.roll("B")
        new = gw.current
        assert new is not None
        assert new.port == old.port
        assert gw.in_flight(old) == 1
        assert gw.in_flight(new) == 0, "B's count is its own, though on A's port"
        gw.leave(old)
        wait_for(lambda: not old.running(), timeout=10, what="A stopped once drained")
        assert new.running()
    finally:
        gw.stop(wait=1)

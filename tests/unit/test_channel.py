"""The event channel: de-duplication, the full policy, and close."""

from __future__ import annotations

import threading

import pytest

from controllers.runtime.channel import Channel, ChannelClosed, ChannelFull
from controllers.runtime.metrics import Metrics


def test_a_burst_for_one_key_travels_as_one() -> None:
    ch: Channel[str] = Channel("c")
    for _ in range(50):
        ch.send("ns/a")
    ch.send("ns/b")
    assert [ch.receive(0), ch.receive(0), ch.receive(0)] == ["ns/a", "ns/b", None]


def test_full_channel_fails_the_sender_after_waiting_and_counts_it() -> None:
    metrics = Metrics(prefix="rotator")
    ch: Channel[str] = Channel("c", capacity=2, send_timeout=0.05, metrics=metrics)
    ch.send("a")
    ch.send("b")
    ch.send("a")  # already waiting: no room needed
    with pytest.raises(ChannelFull):
        ch.send("c")
    assert (
        metrics.registry.get_sample_value("rotator_event_channel_full_total", {"channel": "c"}) == 1
    )
    assert metrics.registry.get_sample_value("rotator_event_channel_depth", {"channel": "c"}) == 2


def test_a_waiting_sender_gets_in_when_room_appears() -> None:
    ch: Channel[str] = Channel("c", capacity=1, send_timeout=10)
    ch.send("a")
    sent = threading.Event()

    def sender() -> None:
        ch.send("b")
        sent.set()

    t = threading.Thread(target=sender)
    t.start()
    assert not sent.wait(0.05)
    assert ch.receive(1) == "a"
    assert sent.wait(5)
    assert ch.receive(1) == "b"
    t.join()


def test_closed_channel_refuses_and_receivers_drain() -> None:
    ch: Channel[str] = Channel("c")
    ch.send("a")
    ch.close()
    with pytest.raises(ChannelClosed):
        ch.send("b")
    assert ch.receive(1) == "a"
    assert ch.receive(1) is None

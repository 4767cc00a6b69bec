"""``rotator standins`` against ``rotator dev``'s admin endpoint, both real, over loopback: keys
accepted and retired at the OpenAI stand-in, a stand-in made to fail and healed, the wait for a
key no gateway proxy carries, and the answers to what cannot be done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from controllers import cli
from rotator_devkit.devenv import admin, control
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.devenv.standins.httpstub import Stub


class StandIns:
    """What the admin endpoint reads of ProviderStandIns: real model stand-ins, unstarted."""

    def __init__(self) -> None:
        self.openai = upstreams.OpenAIStandIn()

    def stubs(self) -> dict[str, Stub]:
        return {"openai": self.openai}

    def upstreams(self) -> dict[str, upstreams.ModelUpstream]:
        return {"openai": self.openai}

    def issued(self) -> frozenset[str]:
        return self.openai.issued_values()


class Gateways:
    def __init__(self) -> None:
        self.carried: set[str] = set()

    def holds(self, value: str) -> bool:
        return value in self.carried

    def status(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def endpoint() -> Iterator[tuple[admin.DevAdmin, StandIns, Gateways]]:
    standins, gateways = StandIns(), Gateways()
    served = admin.DevAdmin(standins, gateways).start()  # type: ignore[arg-type]
    yield served, standins, gateways
    served.stop()


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, Any, str]:
    code = cli.main(["standins", "--admin", url, *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def test_a_key_is_accepted_beside_the_others_then_retired(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, standins, _ = endpoint
    standins.openai.accept("sk-first")
    assert run(capsys, served.url, "accept-key", "sk-second")[:2] == (
        0,
        {"accepted": 1, "retired": 0},
    )
    labels = {standins.openai.label(k) for k in ("sk-first", "sk-second")}
    code, status, _ = run(capsys, served.url, "status")
    assert code == 0
    assert set(status["openaiKeys"]) == labels
    assert "sk-first" not in json.dumps(status), "labels, never keys"
    assert run(capsys, served.url, "retire-key", "sk-first")[0] == 0
    assert standins.openai.accepted() == [standins.openai.label("sk-second")]


def test_a_stand_in_fails_until_healed_and_an_unknown_one_is_named(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, standins, _ = endpoint
    assert run(capsys, served.url, "fail", "openai")[:2] == (
        0,
        {"standIn": "openai", "mode": "fail"},
    )
    assert standins.openai.mode == "fail"
    assert run(capsys, served.url, "heal", "openai")[0] == 0
    assert standins.openai.mode == "ok"
    code, _, err = run(capsys, served.url, "fail", "nope")
    assert code == 1
    assert "no stand-in 'nope'" in err


def test_wait_released_returns_once_no_proxy_carries_the_key_and_gives_up_after_its_timeout(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, _, gateways = endpoint
    assert run(capsys, served.url, "wait-released", "sk-old")[:2] == (0, {"held": False})
    gateways.carried.add("sk-old")
    code = control.run("wait-released", "sk-old", url=served.url, timeout=0.2)
    assert code == 1
    assert "still carries the key" in capsys.readouterr().err


def test_usage_without_a_value_and_an_endpoint_that_is_not_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["standins", "--admin", "http://127.0.0.1:9", "accept-key"]) == cli.EXIT_USAGE
    code, _, err = run(capsys, "http://127.0.0.1:9", "status")
    assert code == 1
    assert "Connection refused" in err

"""Renewal failure safety, end to end against the STS stand-in (60 s sessions):

* a ``renewBefore`` longer than the session no longer makes a hot loop: renewals keep to the
  floor (1/10 of the lifetime, at least 5 s, after issue) and the policy says its setting was
  overridden (``RenewBeforeHonored=False``, reason ``RenewBeforeTooLong``);
* a controller whose scheduler loses every timer fire for the policy still renews it before
  expiry (the delaying queue's sweep).

The policies use the OIDC exchange source, so no ServiceAccount has to opt in.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from controllers.reconcilers import api as rapi
from controllers.runtime import delaying
from rotator import schedule
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import ASSUME, STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.lossy_timers_cli import ENV as LOSE_TIMERS
from tests.support.polling import wait_for

CLIENT_SECRET = "oidc-client-secret-floor-test-7731"
SESSION = 60.0
"""The STS stand-in's session lifetime (tests/e2e/conftest.py)."""
ROUNDING = 1.0
"""Issue and refresh times are kept in whole seconds (the derived Secret's annotations), so a
refresh can come up to a second earlier than the exact schedule."""
SLACK = 1.0
"""Seconds between a reconcile reading the time and its STS call (the first one also fetches the
OIDC token), and of scheduling noise on a busy test machine."""


def oidc_policy(chain: AWSChain, issuer: OIDCIssuer, name: str, rotation: dict[str, Any]) -> None:
    client = f"client-{chain.ns}-{name}"
    issuer.register(client, CLIENT_SECRET)
    chain.secret(f"{name}-client", **{"client-secret": CLIENT_SECRET})
    chain.create(
        "policy",
        name,
        {
            "type": "AWSCredentials",
            "targetRefs": [],
            "awsCredentials": {
                "region": "us-east-1",
                "oidcExchangeToken": {
                    "oidc": {
                        "issuer": issuer.issuer,
                        "clientID": client,
                        "clientSecretRef": {"name": f"{name}-client"},
                    },
                    "awsRoleArn": ROLE_ARN,
                },
            },
            "rotation": rotation,
        },
    )


def assume_times(sts: STSProxy, chain: AWSChain, policy: str, at_least: int) -> list[float] | None:
    """When STS minted the policy's sessions, once there are ``at_least`` of them."""
    times = [c.at for c in sts.calls_of(ASSUME, f"rotator.{chain.ns}.{policy}")]
    return times if len(times) >= at_least else None


def test_a_renew_before_longer_than_the_session_keeps_to_the_floor_and_says_so(
    chain: AWSChain, oidc_issuer: OIDCIssuer, sts: STSProxy
) -> None:
    oidc_policy(chain, oidc_issuer, "long", {"renewBefore": "2h"})
    honored = chain.wait_condition(
        "policy", "long", rapi.RENEW_BEFORE_HONORED, "False", rapi.REASON_RENEW_BEFORE_TOO_LONG
    )
    assert "spec.rotation.renewBefore (2h)" in honored["message"]
    ready = chain.wait_condition("policy", "long", "Ready", "True", "CredentialsReady")
    assert "renewBefore (2h)" in ready["message"], "Ready stays True and says it too"
    wait_for(
        lambda: rapi.REASON_RENEW_BEFORE_TOO_LONG in chain.event_reasons("long"),
        what="a Warning Event",
    )

    calls = wait_for(
        lambda: assume_times(sts, chain, "long", 4),
        timeout=60,
        what="three renewals",
    )
    floor = schedule.renewal_floor(issued_at=0, expires_at=SESSION)  # 6 s after issue
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    window = calls[-1] - calls[0]
    min_gap = floor - ROUNDING - SLACK
    bound = 1 + window / min_gap
    print(
        f"\nrenewBefore 2h on {SESSION:.0f} s sessions: {len(calls)} AssumeRole calls in "
        f"{window:.1f} s (bound {bound:.1f}); gaps {', '.join(f'{g:.1f}' for g in gaps)} s"
    )
    assert min(gaps) >= min_gap, "never sooner than the floor after issue"
    assert len(calls) <= bound, "a handful of provider calls, not a loop"
    assert max(gaps) < SESSION, "each session renewed before it expired"


def test_lost_timer_fires_do_not_stop_renewals(
    chain: AWSChain,
    oidc_issuer: OIDCIssuer,
    sts: STSProxy,
    controller: ControllerProcess,
    tmp_path: Path,
) -> None:
    controller.stop()
    lossy = ControllerProcess(
        controller.kubeconfig,
        tmp_path,
        env={**controller.env, LOSE_TIMERS: f"{chain.ns}/"},
        args=controller.args,
        lease=controller.lease,
        module="tests.support.lossy_timers_cli",
    )
    try:
        lossy.start()
        renew_at = 10.0  # renewBefore 50s on a 60 s session
        oidc_policy(chain, oidc_issuer, "lossy", {"renewBefore": "50s", "jitter": 0})
        chain.wait_condition(
            "policy", "lossy", rapi.RENEW_BEFORE_HONORED, "True", rapi.REASON_AS_SPECIFIED
        )
        calls = wait_for(
            lambda: assume_times(sts, chain, "lossy", 3),
            timeout=60,
            what="two renewals",
        )
        gaps = [b - a for a, b in itertools.pairwise(calls)]
        late = delaying.SWEEP_GRACE + 1.0  # the sweep runs every second
        print(f"\nevery timer fire lost: renewals {', '.join(f'{g:.1f}' for g in gaps)} s apart")
        assert all(renew_at - ROUNDING - SLACK <= g <= renew_at + late + SLACK for g in gaps), gaps
        assert max(gaps) < SESSION, "renewed before expiry"
        logs = lossy.logs()
        swept = [
            line
            for line in logs.splitlines()
            if "delaying.timer_missed" in line and f"{chain.ns}/lossy" in line
        ]
        assert swept, "the fires were lost, and the sweep made them up"
        assert not chain.leaks(logs)
    finally:
        if lossy.proc is not None:
            lossy.stop()
        controller.start()

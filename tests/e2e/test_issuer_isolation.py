"""Tenant isolation: one tenant's OIDC issuer that trickles its discovery document (a byte a
second: no socket read ever times out) stalls only that tenant's policies. More of them than
there are policy workers fail within the OIDC deadline and then fail fast (the failure is
remembered, a retry in flight is not queued behind), while an API-key policy and an STS policy
whose token comes from a healthy issuer keep their schedule.

    KUBEBUILDER_ASSETS=$(hack/testenv.sh | tail -n 1) .venv/bin/pytest \\
        tests/e2e/test_issuer_isolation.py -x -q -s
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from rotator import oidc
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import ASSUME, STSProxy
from tests.e2e.test_aws import CLIENT_SECRET, oidc_source
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.history import ScheduleHistory, SecretHistory
from tests.support.polling import wait_for

STALLED = 18
"""Policies on the trickling issuer: more than the 16 policy workers."""
DEADLINE = oidc.DEADLINE


class TricklingIssuer(OIDCIssuer):
    """An issuer whose discovery document arrives one byte a second, until the client gives up."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = threading.Event()

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        if not handler.path.startswith("/.well-known/openid-configuration"):
            super().handle(handler, method, body)
            return
        self.counted("discovery")
        doc = json.dumps({"issuer": self.issuer, "token_endpoint": f"{self.issuer}/token"})
        payload = doc.encode() + b" " * 4096  # over an hour at a byte a second
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        for i in range(len(payload)):
            if self.stopping.wait(1.0):
                return
            try:
                handler.wfile.write(payload[i : i + 1])
                handler.wfile.flush()
            except OSError:
                return  # the controller gave up on it

    def stop(self) -> None:
        self.stopping.set()
        super().stop()


@pytest.fixture
def trickling() -> Iterator[TricklingIssuer]:
    issuer = TricklingIssuer().start()
    yield issuer
    issuer.stop()


def edit_api_key(chain: AWSChain, history: SecretHistory, n: int) -> float:
    """Changes the API key; seconds until its derived Secret held the new key."""
    versions = history.count("steady-key")
    edited = time.time()
    chain.secret("api-key", apiKey=f"sk-steady-{n:03d}-5d1e0c")
    wait_for(
        lambda: history.count("steady-key") > versions,
        timeout=4 * DEADLINE,
        what=f"API key edit {n} propagated",
    )
    return history.of("steady-key")[-1].seen_at - edited


def test_a_trickling_issuer_stalls_only_its_own_policies(
    chain: AWSChain,
    oidc_issuer: OIDCIssuer,
    sts: STSProxy,
    trickling: TricklingIssuer,
    controller: ControllerProcess,
) -> None:
    oidc_issuer.token_lifetime = 30  # stale at each renewal: the healthy issuer is asked again
    try:
        client = f"steady-{chain.ns}"
        oidc_issuer.register(client, CLIENT_SECRET)
        chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
        chain.secret("api-key", apiKey="sk-steady-000-5d1e0c")
        with (
            SecretHistory(chain.api, chain.ns) as history,
            ScheduleHistory(chain.api, chain.ns) as plan,
        ):
            chain.api_key_policy("steady-key", secret="api-key", targets=[])
            chain.aws_policy("steady-sts", [], oidc_source(oidc_issuer, client))
            for name in ("steady-key", "steady-sts"):
                chain.wait_condition("policy", name, "Ready", "True", timeout=60)
            tokens_before = oidc_issuer.count("token")

            # the storm: more policies on the trickling issuer than there are policy workers
            storm = time.time()
            for i in range(STALLED):
                trickling.register(f"tenant-b-{i}", CLIENT_SECRET)
                chain.aws_policy(f"stalled-{i:02d}", [], oidc_source(trickling, f"tenant-b-{i}"))
            first_edit = edit_api_key(chain, history, 1)  # the worst moment: workers all taken
            for i in range(STALLED):
                chain.wait_condition(
                    "policy", f"stalled-{i:02d}", "Ready", "False", "ProviderUnavailable",
                    timeout=3 * DEADLINE,
                )  # fmt: skip
            all_failed = time.time() - storm

            # the stall goes on; the healthy policies keep their schedule
            session = f"rotator.{chain.ns}.steady-sts"

            def renewed_twice() -> bool:  # the first session was issued before the storm
                return len(sts.calls_of(ASSUME, session)) >= 3

            edits: list[float] = []
            while not renewed_twice():
                edits.append(edit_api_key(chain, history, len(edits) + 2))
                assert time.time() - storm < 150, "steady-sts did not renew twice"
                next_edit = time.time() + 4  # an edit every few seconds, until then
                wait_for(
                    lambda: renewed_twice() or time.time() >= next_edit,  # noqa: B023
                    timeout=10,
                    interval=0.2,
                    what="the next API key edit",
                )
            elapsed = time.time() - storm
            calls = [c.at for c in sts.calls_of(ASSUME, session)]
            announced = plan.of("steady-sts")

        lateness, margins = [], []
        for (renewal, expiry), rotated in zip(announced, calls[1:], strict=False):
            lateness.append(rotated - renewal)
            margins.append(expiry - renewal)
        discoveries = trickling.count("discovery")
        print(
            f"\n{STALLED} policies on an issuer trickling its discovery document; "
            f"all failed {all_failed:.1f} s after creation (deadline {DEADLINE:g} s)"
            f"\n  steady-sts rotations vs renewalTime: "
            + ", ".join(f"{late * 1000:+.0f} ms" for late in lateness)
            + f" (each had {min(margins):.0f} s before expiry)"
            f"\n  API key edit → derived Secret: {first_edit * 1000:.0f} ms at the storm's start, "
            f"then max {max(edits) * 1000:.0f} ms, median {statistics.median(edits) * 1000:.0f} ms"
            f" over {len(edits)} edits"
            f"\n  discovery requests to the trickling issuer in {elapsed:.0f} s: {discoveries}"
        )
        assert len(lateness) >= 2
        # The hard bound, from the schedule: a renewal may be late, never past expiry.
        assert all(late < margin for late, margin in zip(lateness, margins, strict=True))
        # And from the design: no worker is held longer than one deadline, so nothing queued
        # behind the stalled policies waits longer than that.
        assert max(lateness) < DEADLINE
        assert max(edits) < DEADLINE
        assert first_edit < 2 * DEADLINE  # even at the storm's start: one deadline of full workers
        assert all_failed < 2 * DEADLINE
        # One discovery in flight at a time, and a failed one remembered: at most one per deadline
        assert discoveries <= 1 + elapsed / DEADLINE
        assert oidc_issuer.count("token") >= tokens_before + 2, "the healthy issuer was used"
        ready = chain.condition("policy", "steady-sts", "Ready") or {}
        assert ready.get("reason") == "CredentialsReady"
        assert ((chain.get("policy", "steady-sts") or {})["status"]).get("failedAttempts") == 0
    finally:
        oidc_issuer.token_lifetime = 300

"""AWS credentials minted against moto (behind the STS proxy that checks tokens and shortens
sessions to 60 s), with a real OIDC issuer and the API server's TokenRequest."""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Any

import boto3
import botocore.config

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from rotator import schedule
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import ASSUME, STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import backoff
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.history import SecretHistory
from tests.support.polling import Timeout, wait_for

CLIENT_SECRET = "oidc-client-secret-do-not-log-4242"
LONGEST_RETRY = backoff.CAP * (1 + backoff.JITTER)
"""The documented schedule's longest wait between two attempts of a failing policy."""
SLACK = 30.0
"""Seconds, on top of the schedule, for an attempt's own work on a loaded machine (TokenRequest,
provider call, status write): in timeouts only, never in an asserted bound."""


def oidc_source(issuer: OIDCIssuer, client: str) -> dict[str, Any]:
    return {
        "oidcExchangeToken": {
            "oidc": {
                "issuer": issuer.issuer,
                "clientID": client,
                "clientSecretRef": {"name": "oidc-client"},
            },
            "awsRoleArn": ROLE_ARN,
        }
    }


def sa_source(service_account: str, role: str = ROLE_ARN) -> dict[str, Any]:
    return {"serviceAccountToken": {"serviceAccountName": service_account, "awsRoleArn": role}}


def caller(proxy: STSProxy, keys: Any) -> str:
    """Who these keys are, asked of the STS proxy: it checks the SigV4 signature and the session
    token against what it issued (moto alone checks neither), so a wrong secret key or token
    raises (tests/e2e/test_signatures.py proves it)."""
    sts = boto3.client(
        "sts",
        region_name="us-east-1",
        endpoint_url=proxy.url,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
        aws_session_token=keys.session_token,
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )
    return str(sts.get_caller_identity()["Arn"])


def web_identity_chain(chain: AWSChain, issuer: OIDCIssuer) -> None:
    client = f"client-{chain.ns}"
    issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    chain.aws_policy("oidc", ["bedrock-oidc"], oidc_source(issuer, client))
    chain.aws_policy("sa", ["bedrock-sa"], sa_source("default"))
    for b in ("bedrock-oidc", "bedrock-sa"):
        chain.backend(b, schema="AWSBedrock", host="bedrock-runtime.us-east-1.amazonaws.com")
    chain.route("claude", ["bedrock-oidc", "bedrock-sa"], model="claude")


def test_web_identity_credentials_rotate_before_expiry_and_work(
    chain: AWSChain, oidc_issuer: OIDCIssuer, sts: STSProxy
) -> None:
    tokens = oidc_issuer.count("token")  # the issuer serves the whole session: count from here
    with SecretHistory(chain.api, chain.ns) as history:
        web_identity_chain(chain, oidc_issuer)
        for policy in ("oidc", "sa"):
            chain.wait_condition("policy", policy, "Ready", "True", "CredentialsReady", timeout=60)
        for policy in ("oidc", "sa"):
            keys = chain.aws_keys(policy)
            assert keys is not None
            assert keys.session_token
            assert (
                caller(sts, keys)
                == f"arn:aws:sts::123456789012:assumed-role/bedrock/rotator.{chain.ns}.{policy}"
            )
        wait_for(
            lambda: all(history.count(p) >= 4 for p in ("oidc", "sa")),
            timeout=200,
            interval=0.5,
            what="three rotations each",
        )
        for policy in ("oidc", "sa"):
            versions = history.of(policy)
            for previous, following in itertools.pairwise(versions):
                assert previous.expires_at is not None
                margin = previous.expires_at - following.seen_at
                print(f"{policy}: replaced {margin:.1f} s before expiry")
                assert margin > 0, "replaced before it expired"
        status = (chain.get("policy", "oidc") or {})["status"]
        assert {"expirationTime", "renewalTime", "lastRotationTime"} <= set(status)
        assert status["failedAttempts"] == 0
        keys = chain.aws_keys("sa")
        assert keys is not None
        wait_for(
            lambda: (
                (chain.backend_credentials("claude").get("bedrock-sa") or {})
                .get("data", {})
                .get("credentials", "")
                .find(keys.access_key_id)
                >= 0
            ),
            what="route config carries the current session",
        )
        assert oidc_issuer.count("token") > tokens, "this test's client got its token there"


def test_sts_outage_keeps_ready_while_valid_then_expires_then_recovers(
    chain: AWSChain, sts: STSProxy
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    expires = chain.expiration("sa")
    assert expires is not None
    sts.set_mode("fail")
    try:
        failing = chain.wait_condition(
            "policy", "sa", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "ServiceUnavailable" in failing["message"]
        assert time.time() < expires, "reported while the credential is still valid"
        expired = chain.wait_condition(
            "policy",
            "sa",
            "Ready",
            "False",
            "Expired",
            timeout=expires - time.time() + LONGEST_RETRY + SLACK,
        )
        # When the reconcile that saw it lapse began (whole seconds, rounded down): never
        # before the expiry (a Ready=False while valid takes a good credential from the routes),
        # however late a loaded machine makes it.
        transition = clocks.parse_rfc3339(expired["lastTransitionTime"])
        print(f"\nExpired {transition - expires:.0f} s after expiry: {expired['message']}")
        assert transition >= expires, "Expired only once the credential lapsed"
        wait_for(lambda: "RotationFailed" in chain.event_reasons("sa"), what="RotationFailed event")
    finally:
        sts.set_mode("ok")
    restored = time.time()
    # The next attempt is due within the longest backoff step; it is the one that recovers.
    chain.wait_condition(
        "policy",
        "sa",
        "Ready",
        "True",
        "CredentialsReady",
        timeout=LONGEST_RETRY + SLACK,
    )
    since = [c for c in sts.calls_of(ASSUME, f"rotator.{chain.ns}.sa") if c.at > restored]
    print(f"recovered {time.time() - restored:.1f} s after STS returned")
    assert len(since) <= 1, "recovered at the first attempt after STS returned"
    assert (chain.get("policy", "sa") or {})["status"]["failedAttempts"] == 0


def test_oidc_issuer_outage_keeps_ready_while_valid(
    chain: AWSChain, oidc_issuer: OIDCIssuer
) -> None:
    oidc_issuer.token_lifetime = 40  # the cached token will not outlive the session
    try:
        client = f"client-{chain.ns}"
        oidc_issuer.register(client, CLIENT_SECRET)
        chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
        chain.aws_policy("oidc", ["b"], oidc_source(oidc_issuer, client))
        chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
        oidc_issuer.set_mode("fail")
        failing = chain.wait_condition(
            "policy", "oidc", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "OIDC" in failing["message"]
        oidc_issuer.set_mode("ok")
        chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
    finally:
        oidc_issuer.set_mode("ok")
        oidc_issuer.token_lifetime = 300


def test_restart_reuses_valid_credentials_and_a_deleted_secret_is_restored(
    chain: AWSChain, sts: STSProxy, controller: ControllerProcess
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    session = f"rotator.{chain.ns}.sa"
    before = chain.get("secret", "rotator-bsp-sa")
    calls = len(sts.calls_of(ASSUME, session))
    controller.restart()
    wait_for(controller.idle, what="settled after restart")
    assert len(sts.calls_of(ASSUME, session)) == calls, "no STS call for a still-valid credential"
    after = chain.get("secret", "rotator-bsp-sa")
    assert before is not None
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    chain.delete("secret", "rotator-bsp-sa")
    wait_for(
        lambda: chain.get("secret", "rotator-bsp-sa") is not None, what="derived Secret restored"
    )
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady")
    assert len(sts.calls_of(ASSUME, session)) == calls + 1


def test_rotation_can_be_requested(chain: AWSChain, sts: STSProxy) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    first = chain.aws_keys("sa")
    chain.request_rotation("sa", "now-1")
    wait_for(
        lambda: (
            (k := chain.aws_keys("sa")) is not None
            and first is not None
            and k.access_key_id != first.access_key_id
        ),
        what="rotated on request",
    )
    wait_for(lambda: "CredentialsRotated" in chain.event_reasons("sa"), what="event")


def test_rejected_role_is_reported_and_not_hammered(chain: AWSChain, sts: STSProxy) -> None:
    """A role that does not trust the token: ``ProviderRejected``, and retries on the documented
    schedule (1 s doubling, ±20 %; tests/support/backoff.py). The k-th AssumeRole call comes no
    sooner after the policy was created than the schedule allows — a hard bound: a loaded
    machine only makes calls later — and a sixth one does come (the sixth is due 24.8-37.2 s
    after the first: a faster schedule is caught even if the first call is late by 15 s).

    Mutations caught: a constant 1 s retry delay (the third call after 2 s, not 2.4), a zero
    delay (a hot loop)."""
    session = f"rotator.{chain.ns}.denied"
    created = time.time()
    chain.aws_policy(
        "denied", ["b"], sa_source("default", role="arn:aws:iam::123456789012:role/not-trusted")
    )
    ready = chain.wait_condition(
        "policy", "denied", "Ready", "False", "ProviderRejected", timeout=60
    )
    assert "AccessDenied" in ready["message"]
    wait_for(lambda: "ProviderRejected" in chain.event_reasons("denied"), what="event")
    wait_for(
        lambda: len(sts.calls_of(ASSUME, session)) >= 6,
        timeout=backoff.latest(6) + SLACK,
        what="five retries",
    )
    calls = sts.calls_of(ASSUME, session)
    since = [c.at - created for c in calls]
    print(
        f"\nAssumeRole calls for a rejected role, s after creation: {[round(t, 1) for t in since]}"
    )
    for attempt, elapsed in enumerate(since, start=1):
        assert elapsed >= backoff.earliest(attempt), (
            f"attempt {attempt} came {elapsed:.1f} s after the policy was created; the schedule "
            f"allows it no sooner than {backoff.earliest(attempt):.1f} s"
        )


def test_retries_get_denser_as_expiry_nears(chain: AWSChain, sts: STSProxy) -> None:
    """README: retries "back off exponentially (1 s doubling, at most 1 min, denser as expiry
    nears)": while the served session is valid no retry is scheduled past half the time it has
    left, so the retries of a refused refresh crowd towards the expiry and some land before it.

    The role stops trusting the token right after the first mint, so every refresh is refused
    from the renewal (30 s before expiry or a little more) on. Documented: retries at about 15,
    7.5, 3.75, 1.9, 0.9 s to go — six in the last 20 s; at least three in every simulated run of
    the schedule with up to 1 s of work per attempt, 99.5 % with up to 2 s (here it takes well
    under one). Without the half-the-remaining bound the retries keep doubling (1, 2, 4, 8,
    16 s…) and at most two fit in those 20 s before the one at expiry.

    Mutations caught: ``retry_delay`` without the half-the-remaining-validity bound."""
    role = f"arn:aws:iam::123456789012:role/denser-{chain.ns}"
    session = f"rotator.{chain.ns}.sa"
    sts.roles.add(role)
    try:
        chain.aws_policy("sa", [], sa_source("default", role=role))
        chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    finally:
        sts.roles.discard(role)  # from now on every refresh is refused (AccessDenied)
    expires = chain.expiration("sa")
    assert expires is not None
    assert len(sts.calls_of(ASSUME, session)) == 1, "refused only after the first mint"
    chain.wait_condition(
        "policy",
        "sa",
        "Ready",
        "False",
        "Expired",
        timeout=expires - time.time() + LONGEST_RETRY + SLACK,
    )
    refused = [c.at for c in sts.calls_of(ASSUME, session)[1:] if c.at < expires]
    to_go = [round(expires - t, 1) for t in refused]
    print(f"\nrefused refreshes before expiry, s to go: {to_go}")
    assert refused, "the refresh was tried before expiry"
    last_20 = [t for t in refused if t > expires - 20]
    assert len(last_20) >= 3, f"denser as expiry nears: {to_go}"


def test_fifty_simultaneous_policies_renew_spread_over_the_jitter_window(
    chain: AWSChain, sts: STSProxy
) -> None:
    """Fifty policies minted together renew within ±10 % of their renewal window (README
    "Rotation"), each on the side of the centre its uid fixes, so they do not renew together.

    A 60 s session's window ends 30 s before expiry: W = expiry - issue - 30 (about 30 s), and
    the renewal is due at issue + 0.9 W + 0.1 W u, rounded down to a whole second, with u in
    [-1, 1] fixed by the policy's uid (``rotator.schedule.stable_unit``). Checked on the wire:
    every renewal call comes no sooner than its policy's due time (a hard bound: the timer
    cannot fire early), before the session expired, and the renewals' offsets from issue follow
    u with a slope of 0.1 W (a least-squares fit over fifty policies; the delays of a loaded
    machine do not depend on u, so they do not bend it).

    Mutations caught: jitter removed (a slope of 0), jitter of ±50 % (renewals from 6 s after
    issue, before their due time; a slope five times too steep)."""
    names = [f"p{i:02d}" for i in range(50)]
    with SecretHistory(chain.api, chain.ns) as history:
        for name in names:
            chain.aws_policy(name, [], sa_source("default"))
        for name in names:
            chain.wait_condition("policy", name, "Ready", "True", timeout=120)

        def renewed(name: str) -> bool:  # on the wire, and the new Secret seen
            calls = sts.calls_of(ASSUME, f"rotator.{chain.ns}.{name}")
            return len(calls) >= 2 and history.count(name) >= 2

        wait_for(
            lambda: all(renewed(n) for n in names),
            timeout=120,
            interval=0.5,
            what="every policy renewed once",
        )
    points, windows, renewals = [], [], []
    for name in names:
        first = history.of(name)[0]
        assert first.issued_at is not None
        assert first.expires_at is not None
        policy = chain.get("policy", name)
        assert policy is not None
        u = schedule.stable_unit(policy["metadata"]["uid"])
        window = first.expires_at - first.issued_at - 30
        due = math.floor(first.issued_at + window * (0.9 + 0.1 * u))
        renewal = sts.calls_of(ASSUME, f"rotator.{chain.ns}.{name}")[1].at
        assert renewal >= due, (
            f"{name} renewed {due - renewal:.1f} s before its due time "
            f"(u = {u:+.2f}: {window * (0.9 + 0.1 * u):.1f} s after issue)"
        )
        assert renewal < first.expires_at, f"{name} renewed before its session expired"
        points.append((u, renewal - first.issued_at))
        windows.append(window)
        renewals.append(renewal)
    mean_u = sum(u for u, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    slope = sum((u - mean_u) * (t - mean_t) for u, t in points) / sum(
        (u - mean_u) ** 2 for u, _ in points
    )
    spread = 0.1 * sum(windows) / len(windows)
    print(
        f"\n50 renewals over {max(renewals) - min(renewals):.1f} s; offset from issue = "
        f"{mean_t:.1f} s + {slope:.2f} s x u (documented: {spread:.2f} s x u)"
    )
    assert 0.5 * spread <= slope <= 1.5 * spread, "jittered by ±10 % of the window, per uid"


def test_iam_access_key_rotation_keeps_two_keys_at_most_and_cleans_up(
    chain: AWSChain, moto: str, sts: STSProxy
) -> None:
    iam = boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=moto,
        aws_access_key_id="AKIAADMIN0000000",
        aws_secret_access_key="x",
    )
    user = f"gateway-{chain.ns}"
    arn = iam.create_user(UserName=user)["User"]["Arn"]
    chain.secret(
        "iam-admin",
        credentials="[default]\naws_access_key_id = AKIAADMIN0000000\naws_secret_access_key = admin-secret-value-123\n",
    )
    chain.aws_policy(
        "iam", ["b"], {"iamAccessKey": {"userName": user, "secretRef": {"name": "iam-admin"}}}
    )
    chain.wait_condition("policy", "iam", "Ready", "True", "CredentialsReady", timeout=60)
    policy = chain.get("policy", "iam")
    assert policy is not None
    assert rapi.FINALIZER_IAM_KEY in policy["metadata"]["finalizers"]

    def listed() -> list[str]:
        return sorted(
            k["AccessKeyId"] for k in iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
        )

    # A watcher thread lists the user's keys and tries the served key all along. Its failures
    # (an exception in a call, a refused key) end it and fail the test, and the test goes on only
    # once it has tried every key served, so "at most two" and "always worked" are never
    # vacuous. Mutation-tested: a watcher that dies on its first look fails the test.
    most, invalid, checked = 0, [], set()
    crashed: list[BaseException] = []
    stop = threading.Event()
    # what the watcher is doing and since when, for the message of a wait that times out: a CI
    # run once waited 30 s for the watcher's first look, with no exception from it
    doing = [("starting", time.monotonic())]

    def step(what: str) -> None:
        doing[0] = (what, time.monotonic())

    def watch() -> None:
        nonlocal most
        try:
            while not stop.wait(0.2):
                step("listing the user's keys (moto)")
                most = max(most, len(listed()))
                step("reading the derived Secret")
                keys = chain.aws_keys("iam")
                if keys is not None:
                    step(f"asking the STS stand-in whose key {keys.access_key_id} is")
                    if caller(sts, keys) != arn:
                        invalid.append(keys.access_key_id)
                    checked.add(keys.access_key_id)
                step("waiting for its next look")
        except BaseException as exc:  # kept for the test's thread, which raises it
            crashed.append(exc)

    def watcher_tried(key: str, what: str) -> None:
        try:
            wait_for(lambda: crashed or key in checked, what=f"the watcher tried {what}")
        except Timeout as exc:
            if not crashed:  # one that failed after the last look is reported as that below
                doing_now, since = doing[0]
                raise AssertionError(
                    f"{exc}: the watcher has been {doing_now} for "
                    f"{time.monotonic() - since:.1f} s; it tried {sorted(checked)}"
                ) from exc
        if crashed:
            raise AssertionError("the watcher failed") from crashed[0]

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        first = chain.aws_keys("iam")
        assert first is not None
        served = [first.access_key_id]
        assert listed() == served
        watcher_tried(served[-1], "the first key")

        def rotated() -> bool:
            keys = chain.aws_keys("iam")
            return keys is not None and keys.access_key_id != served[-1]

        def only_served() -> bool:
            return listed() == [served[-1]]

        for request in ("first", "second"):
            chain.request_rotation("iam", request)
            wait_for(rotated, what=f"rotation {request}")
            keys = chain.aws_keys("iam")
            assert keys is not None
            served.append(keys.access_key_id)
            assert keys.access_key_id in listed()
            wait_for(
                only_served, timeout=30, what="the replaced key retired after its grace period"
            )
            watcher_tried(served[-1], f"the key of rotation {request}")
    finally:
        stop.set()
        watcher.join()
    if crashed:
        raise AssertionError("the watcher failed") from crashed[0]
    print(f"\nat most {most} keys at once; served keys: {served}")
    assert checked >= set(served), "the watcher tried every served key"
    assert most <= 2
    assert invalid == [], "the served key always worked"
    chain.delete("policy", "iam")
    wait_for(lambda: chain.get("policy", "iam") is None, timeout=30, what="finalized and deleted")
    assert listed() == [], "deleting the policy deleted its key"


def test_credential_metrics_are_exported_and_dropped_with_the_policy(
    chain: AWSChain, controller: ControllerProcess
) -> None:
    # The counters serve the whole session (every earlier test adds to them): what this policy's
    # first mint adds is what says they count.
    counters = {
        "rotations": ("rotator_rotations_total", {"type": "AWSCredentials", "result": "success"}),
        "AssumeRoleWithWebIdentity": (
            "rotator_provider_requests_total",
            {"provider": "aws-sts", "call": "AssumeRoleWithWebIdentity", "code": "200"},
        ),
        "TokenRequest": (
            "rotator_provider_requests_total",
            {"provider": "kubernetes-tokenrequest", "call": "TokenRequest", "code": "201"},
        ),
    }

    def read() -> dict[str, float]:
        return {k: controller.metric(m, **sel) or 0 for k, (m, sel) in counters.items()}

    before = read()
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    labels = {"namespace": chain.ns, "name": "sa", "type": "AWSCredentials"}
    expires = chain.expiration("sa")
    wait_for(
        lambda: (
            controller.metric("rotator_credential_expiration_timestamp_seconds", **labels)
            == expires
        ),
        what="expiry gauge",
    )
    renewal = controller.metric("rotator_credential_renewal_timestamp_seconds", **labels)
    assert renewal is not None
    assert expires is not None
    assert renewal < expires - 20
    after = read()
    assert {k for k in counters if after[k] > before[k]} == set(counters), (before, after)
    chain.delete("policy", "sa")
    wait_for(
        lambda: (
            controller.metric("rotator_credential_expiration_timestamp_seconds", **labels) is None
        ),
        what="series removed",
    )


def test_a_hanging_sts_holds_at_most_four_calls_and_delays_no_other_policy(
    chain: AWSChain, sts: STSProxy
) -> None:
    """README: "at most 4 calls per provider are in flight, so a hanging provider cannot hold up
    policies that use another one" (``provider_concurrency``, default 4).

    Twenty policies call a hanging STS, more than the 16 policy workers. The stand-in gauges the
    calls in flight (counted from arrival until the answer starts: inside the client's call, so
    it never reads more than the client has in flight): the peak is exactly four — reached, so
    the gauge could have seen more. The callers past the fourth give up after the bulkhead's
    1 s wait, so an API-key policy created after them is Ready while the four calls still hang:
    before the stand-in answered any of them (it holds them until released, 8 s at most, under
    botocore's 10 s read timeout: no call is abandoned and re-sent while the gauge counts it).

    Mutations caught: the bulkhead's limit raised or removed (``rotator/bulkhead.py``), STS given
    a larger bulkhead (``rotator/providers/aws/clients.py``), ``provider_concurrency``
    defaulting to more than 4 — each lets more than four calls in, and without a bulkhead all
    16 workers hang and the API-key policy waits for the first answer."""
    stuck = [f"stuck{i:02d}" for i in range(20)]
    sts.hang_seconds = 8
    sts.set_mode("hang")
    released = sts.count("answered_held")
    sts.reset_peak()
    try:
        for name in stuck:
            chain.aws_policy(name, [], sa_source("default"))
        wait_for(lambda: sts.in_flight >= 4, what="four STS calls hanging")
        chain.secret("key", apiKey="sk-isolation-test-value")
        chain.api_key_policy("fast", secret="key", targets=[])
        chain.wait_condition("policy", "fast", "Ready", "True", timeout=60)
        hanging, answered = sts.in_flight, sts.count("answered_held") - released
        print(
            f"\nthe API-key policy is Ready with {hanging} STS calls hanging and {answered} "
            f"answered; peak in flight {sts.peak_in_flight}"
        )
        assert answered == 0, "Ready while the STS calls hang, not after the first answer"
    finally:
        sts.set_mode("ok")
        sts.hang_seconds = 60
    for name in stuck:
        chain.wait_condition("policy", name, "Ready", "True", timeout=LONGEST_RETRY + SLACK)
    print(f"peak STS calls in flight: {sts.peak_in_flight}")
    assert sts.peak_in_flight == 4, "at most provider_concurrency (4) calls in flight to STS"

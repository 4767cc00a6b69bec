"""The promises made about minted credentials, each held against a mutation of the code that
would break it (named in each test's docstring, and tried by hand: issue 15).

* An expired credential leaves the route configuration (README: "no consumer ever holds an
  expired or stale credential"; docs/design.md: "an expired credential never stays in a
  configuration"; docs/api.md: Ready=False ``Expired``, "Routes leave it out") and comes back
  when the policy recovers.
* A minted credential is refreshed when its derived Secret is edited or the credential part of
  the spec changes (README, "Rotation"), and not when only ``targetRefs`` change.

AWS sessions come from the STS stand-in (tests/e2e/conftest.py), which records every
``AssumeRoleWithWebIdentity`` under its session name, ``rotator.<namespace>.<policy>``: a count
of those is a count of mint attempts.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from controllers.reconcilers import api as rapi
from controllers.runtime import objects
from rotator import formats
from rotator_devkit.devenv.standins.sts import ASSUME, STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support.chain import AWSChain
from tests.support.polling import wait_for

SA_SOURCE: dict[str, Any] = {
    "serviceAccountToken": {"serviceAccountName": "default", "awsRoleArn": ROLE_ARN}
}
BEDROCK = "bedrock-runtime.us-east-1.amazonaws.com"

SHORT = 40
"""Session lifetime (s) for the expiry test: long enough to look at the route while the session
is valid and failing to refresh, short enough for a test of about a minute."""
LONG = 900
"""Session lifetime (s) for the refresh tests: no refresh falls due while they run, so every
session minted is one the test caused."""
HANG_LEAD = 5.0
"""Seconds before the expiry at which STS turns from failing fast to hanging. The attempt then in
flight outlasts the expiry by at least the controller's STS read timeout (10 s,
rotator/providers/aws/clients.py) minus this, a window in which the policy still says
``Ready=True`` (``RotationFailed``): only the Route's own expiry check can take the backend out."""
SLACK = 30.0
"""Seconds allowed on top of a known due time for the controller's work on a loaded machine: in
timeouts only, never in an asserted bound."""


@contextlib.contextmanager
def session_lifetime(sts: STSProxy, seconds: int) -> Iterator[None]:
    """STS sessions of ``seconds`` for the test; the stand-in serves the whole run."""
    previous = sts.lifetime
    sts.lifetime = seconds
    try:
        yield
    finally:
        sts.lifetime = previous


def mints(sts: STSProxy, chain: AWSChain, policy: str) -> int:
    return len(sts.calls_of(ASSUME, f"rotator.{chain.ns}.{policy}"))


def served_key(chain: AWSChain, route: str, backend: str) -> str | None:
    """The access key id the route's configuration gives ``backend``; None when it is left out."""
    served = chain.backend_credentials(route)
    if backend not in served:
        return None
    text = ((served[backend] or {}).get("data") or {}).get("credentials", "")
    keys = formats.parse_aws_credentials(text, profile="default", where="route config")
    chain.remember(keys.secret_access_key, *([keys.session_token] if keys.session_token else []))
    return keys.access_key_id


def current_key(chain: AWSChain, policy: str) -> str:
    keys = chain.aws_keys(policy)
    assert keys is not None
    return keys.access_key_id


def derived(chain: AWSChain, policy: str) -> dict[str, Any]:
    secret = chain.get("secret", rapi.derived_secret_name(policy))
    assert secret is not None
    return secret


def test_an_expired_credential_leaves_the_route_config_and_comes_back(
    chain: AWSChain, sts: STSProxy
) -> None:
    """STS fails, then hangs across the expiry: the backend is served while its session is
    valid, leaves the route configuration when it lapses — by the Route's own expiry check, while
    the policy still says ``Ready=True`` — the other backend stays, the policy turns ``Expired``,
    and once STS is back the backend returns with a new session.

    Mutations caught (each tried by hand): the Route's expiry check removed
    (controllers/reconcilers/route/resolve.py, ``expiry <= now``) — the backend stays past its expiry
    until the policy turns Expired; the Route's requeue at the earliest expiry dropped
    (``Result()``) — the same; a policy that never turns Expired (``valid`` ignoring the expiry in
    policy.py ``_failed``) — Ready stays True; a Route that leaves out a backend whose policy
    reports ``RotationFailed`` (``conditions.is_true`` replaced by a CredentialsReady check) —
    the backend leaves while its session is valid, when the route is rewritten for the other
    backend.
    """
    with session_lifetime(sts, SHORT):
        try:
            chain.secret("steady-key", apiKey="sk-promises-steady-key-0001")
            chain.api_key_policy("steady", secret="steady-key", targets=["steady"])
            chain.backend("steady")
            chain.aws_policy("minted", ["bedrock"], SA_SOURCE)
            chain.backend("bedrock", schema="AWSBedrock", host=BEDROCK)
            chain.route("r", ["steady", "bedrock"])
            chain.wait_condition(
                "policy", "minted", "Ready", "True", "CredentialsReady", timeout=60
            )
            first = current_key(chain, "minted")
            expires = chain.expiration("minted")
            assert expires is not None
            wait_for(lambda: served_key(chain, "r", "bedrock") == first, what="the session served")
            sts.set_mode("fail")
            chain.wait_condition(
                "policy", "minted", "Ready", "True", "RotationFailed", timeout=expires - time.time()
            )
            # The route rewritten meanwhile (the other backend's key changed) keeps the session.
            chain.secret("steady-key", apiKey="sk-promises-steady-key-0002")
            wait_for(
                lambda: (
                    (chain.backend_credentials("r").get("steady") or {})
                    .get("data", {})
                    .get("apiKey")
                    == "sk-promises-steady-key-0002"
                ),
                what="the route rewritten with the other backend's new key",
            )

            def valid_until_the_hang() -> str | None:
                looked = time.time()
                if served_key(chain, "r", "bedrock") != first:
                    return f"left {expires - looked:.1f} s before the expiry"
                return "served" if looked >= expires - HANG_LEAD else None

            served = wait_for(valid_until_the_hang, timeout=expires - time.time(), interval=0.2)
            assert served == "served", "a failing refresh keeps a valid session in the route"
            sts.set_mode("hang")

            wait_for(
                lambda: (
                    served_key(chain, "r", "bedrock") is None
                    and "steady" in chain.backend_credentials("r")
                ),
                timeout=expires - time.time() + SLACK,
                what="the lapsed session out of the route config, the other backend still in",
            )
            ready = chain.condition("policy", "minted", "Ready") or {}
            assert (ready.get("status"), ready.get("reason")) == ("True", "RotationFailed"), (
                "left by the Route's own expiry check, before the policy said anything",
                ready,
            )
            assert time.time() >= expires, "not before the expiry"
            wait_for(
                lambda: "CredentialsExpired" in chain.event_reasons("r"),
                what="the Route's Warning event",
            )

            expired = chain.wait_condition(
                "policy", "minted", "Ready", "False", "Expired", timeout=60 + SLACK
            )
            print(f"\npolicy: {expired['message']}")
            resolved = chain.wait_condition("route", "r", "ResolvedRefs", "False")
            print(f"route: {resolved['reason']}: {resolved['message']}")
            assert resolved["reason"] in ("CredentialsExpired", "PolicyNotReady"), resolved
            assert "minted" in resolved["message"], resolved  # names the policy
            chain.wait_condition("route", "r", "Programmed", "True")
            assert served_key(chain, "r", "bedrock") is None, "still out once the policy says so"
            assert "steady" in chain.backend_credentials("r")
        finally:
            sts.set_mode("ok")

        # Recovery. When the next retry comes is test_aws.py's outage test; here, a requested
        # rotation makes it now.
        chain.request_rotation("minted", "recover")
        chain.wait_condition("policy", "minted", "Ready", "True", "CredentialsReady", timeout=SLACK)
        fresh = current_key(chain, "minted")
        assert fresh != first
        wait_for(lambda: served_key(chain, "r", "bedrock") == fresh, what="the new session served")
        chain.wait_condition("route", "r", "ResolvedRefs", "True")


def test_an_edited_derived_secret_is_replaced_by_a_fresh_session(
    chain: AWSChain, sts: STSProxy
) -> None:
    """README ("Rotation"): a refresh happens when the derived Secret is edited. Its data edited
    by hand (a well-formed file with other keys) → one new session, served in its place.

    Mutation caught (tried by hand): the ``edited`` branch of ``refresh_reason``
    (controllers/reconcilers/policy.py) removed — no new session, the edited keys stay.
    """
    with session_lifetime(sts, LONG):
        chain.aws_policy("sa", [], SA_SOURCE)
        chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
        first, minted = current_key(chain, "sa"), mints(sts, chain, "sa")
        issued = derived(chain, "sa")["metadata"]["annotations"][rapi.ISSUED_AT_ANNOTATION]
        edited = (
            "[default]\naws_access_key_id = AKIAEDITEDBYHAND0000\n"
            "aws_secret_access_key = edited-by-hand-secret-0001\nregion = us-east-1\n"
        )
        chain.remember("edited-by-hand-secret-0001")
        chain.api.patch(
            objects.SECRETS,
            rapi.derived_secret_name("sa"),
            {"data": {"credentials": base64.b64encode(edited.encode()).decode()}},
            namespace=chain.ns,
        )
        wait_for(
            lambda: current_key(chain, "sa") not in (first, "AKIAEDITEDBYHAND0000"),
            what="a fresh session in the derived Secret",
        )
        assert mints(sts, chain, "sa") == minted + 1, "one new session"
        annotations = derived(chain, "sa")["metadata"]["annotations"]
        assert annotations[rapi.ISSUED_AT_ANNOTATION] >= issued  # whole seconds: may be equal
        chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady")


def test_a_changed_credential_spec_mints_a_new_session(chain: AWSChain, sts: STSProxy) -> None:
    """README ("Rotation"): a refresh happens when the credential part of the spec changes. The
    region changed → one new session, in a file that names the new region.

    Mutation caught (tried by hand): ``derived.spec_hash`` hashing the type only
    (controllers/reconcilers/derived.py) — the spec change goes unnoticed, no new session. That
    was the code until this test found it (the block was looked up as ``aWSCredentials``).
    """
    with session_lifetime(sts, LONG):
        chain.aws_policy("sa", [], SA_SOURCE)
        chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
        first, minted = current_key(chain, "sa"), mints(sts, chain, "sa")
        chain.api.patch(
            rapi.POLICIES,
            "sa",
            {"spec": {"awsCredentials": {"region": "eu-west-1"}}},
            namespace=chain.ns,
        )
        wait_for(lambda: current_key(chain, "sa") != first, what="a new session")
        assert mints(sts, chain, "sa") == minted + 1, "one new session"
        text = (chain.secret_data(rapi.derived_secret_name("sa")) or {})["credentials"]
        assert "region = eu-west-1" in text


def test_a_targets_only_change_keeps_the_session(chain: AWSChain, sts: STSProxy) -> None:
    """README ("Rotation"): only the credential part of the spec counts. ``targetRefs`` changed
    → the new target is served, and no session is minted and the derived Secret is not written
    (its resourceVersion, not just its content, stays).

    Mutation caught (tried by hand): ``derived.spec_hash`` hashing the whole spec, targetRefs
    included (controllers/reconcilers/derived.py) — a new session on every target change.
    """
    with session_lifetime(sts, LONG):
        for b in ("first", "second"):
            chain.backend(b, schema="AWSBedrock", host=BEDROCK)
        chain.aws_policy("sa", ["first"], SA_SOURCE)
        chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
        chain.wait_condition("backend", "first", "ResolvedRefs", "True")
        minted = mints(sts, chain, "sa")
        before = derived(chain, "sa")["metadata"]
        patched = chain.api.patch(
            rapi.POLICIES,
            "sa",
            {"spec": {"targetRefs": [{"name": "first"}, {"name": "second"}]}},
            namespace=chain.ns,
        )
        generation = patched["metadata"]["generation"]
        # The reconcile of the new spec is done once its status says it saw that generation;
        # a mint would come before that status write.
        wait_for(
            lambda: (
                (chain.condition("policy", "sa", "Ready") or {}).get("observedGeneration")
                == generation
            ),
            what="the policy reconciled at its new generation",
        )
        chain.wait_condition("backend", "second", "ResolvedRefs", "True")
        assert mints(sts, chain, "sa") == minted, "no session minted for a target change"
        after = derived(chain, "sa")["metadata"]
        assert after["resourceVersion"] == before["resourceVersion"], "not rewritten"
        issued = rapi.ISSUED_AT_ANNOTATION
        assert after["annotations"][issued] == before["annotations"][issued]

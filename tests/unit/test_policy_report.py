"""What a policy reconcile reports (controllers/reconcilers/policy/report.py): the pure
functions from an outcome to status fields, conditions, Events, metrics and the requeue, and the
one writer that carries a report out, in its order."""

from __future__ import annotations

from typing import Any, cast

from prometheus_client import CollectorRegistry

from controllers.reconcilers import api, derived
from controllers.reconcilers.conditions import Cond
from controllers.reconcilers.credentialsources import (
    SourceContext,
    UnsupportedSource,
    rotation_settings,
)
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import report
from controllers.reconcilers.policy.report import Event
from controllers.runtime import clock as clocks
from controllers.runtime import events
from rotator import errors
from rotator.credentials import Credential
from tests.support import memapi

NOW = 1_700_000_000.0
SESSION = Credential({"k": b"v"}, issued_at=NOW - 10, expires_at=NOW + 3590)


def policy(status: dict[str, Any] | None = None, **spec: Any) -> api.Policy:
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}, **spec},
    }
    if status is not None:
        body["status"] = status
    return cast(api.Policy, body)


def ctx(p: api.Policy) -> SourceContext:
    return SourceContext(p, lambda _: None, now=NOW, settings=rotation_settings(p["spec"]))


def reasons(r: report.Report) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in r.conditions}


def test_serving_says_where_until_when_and_the_next_refresh() -> None:
    p = policy()
    due = NOW + 2000
    r = report.serving(p, SESSION, ctx(p), change=derived.Change.CREATED, due=due)
    assert reasons(r) == {
        api.ACCEPTED: ("True", "Accepted"),
        api.READY: ("True", "CredentialsReady"),
        api.RENEW_BEFORE_HONORED: ("True", "AsSpecified"),
    }
    ready = next(c for c in r.conditions if c.type == api.READY)
    assert ready.message == (
        f"credentials are in Secret rotator-bsp-p, valid until {clocks.rfc3339(NOW + 3590)}, "
        f"next refresh at {clocks.rfc3339(due)}"
    )
    assert r.fields == {
        "derivedSecretName": "rotator-bsp-p",
        "failedAttempts": 0,
        "lastRotationTime": clocks.rfc3339(NOW - 10),
        "expirationTime": clocks.rfc3339(NOW + 3590),
        "renewalTime": clocks.rfc3339(due),
    }
    assert r.announce, "the credentials were created: the first Ready=True is news"
    assert r.events == ()
    assert (r.renews_at, r.retry_after) == (due, None)
    assert r.gauges == report.Gauges(NOW + 3590, due)


def test_only_a_rotation_is_an_event_and_a_copy_has_no_timer() -> None:
    p = policy()
    rotated = report.serving(p, SESSION, ctx(p), change=derived.Change.ROTATED, due=NOW + 1)
    assert rotated.events == (
        Event(events.NORMAL, "CredentialsRotated", "new credentials in Secret rotator-bsp-p"),
    )
    assert not rotated.announce
    key = Credential({"apiKey": b"sk"})
    copy = report.serving(p, key, ctx(p), change=derived.Change.REPAIRED, due=None)
    assert copy.events == ()
    assert copy.renews_at is None
    assert "renewalTime" not in copy.fields
    assert api.RENEW_BEFORE_HONORED not in reasons(copy)


def test_a_clamped_renew_before_is_warned_only_when_it_turns_so() -> None:
    p = policy(rotation={"renewBefore": "59m"})
    r = report.serving(p, SESSION, ctx(p), change=derived.Change.NONE, due=NOW + 100)
    assert reasons(r)[api.RENEW_BEFORE_HONORED] == ("False", "RenewBeforeTooLong")
    assert [e.reason for e in r.events] == ["RenewBeforeTooLong"]
    was = policy(
        {"conditions": [{"type": api.RENEW_BEFORE_HONORED, "status": "False"}]},
        rotation={"renewBefore": "59m"},
    )
    again = report.serving(was, SESSION, ctx(was), change=derived.Change.NONE, due=NOW + 100)
    assert again.events == ()


def test_a_failure_counts_its_attempt_and_keeps_the_other_fields() -> None:
    p = policy({"failedAttempts": 2, "derivedSecretName": "rotator-bsp-p", "conditions": []})
    r = report.failed(p, errors.ProviderUnavailable("STS down"), None, now=NOW, minted=True)
    assert r.fields == {
        "derivedSecretName": "rotator-bsp-p",
        "failedAttempts": 3,
        "lastFailureTime": clocks.rfc3339(NOW),
    }
    assert reasons(r) == {
        api.ACCEPTED: ("True", "Accepted"),
        api.READY: ("False", "ProviderUnavailable"),
    }
    assert r.events == (), "announced only at the first attempt"
    assert r.ready_events
    assert r.retry_after is not None
    assert r.gauges == report.Gauges(None, NOW + r.retry_after)
    assert r.warning is not None
    assert r.warning[0] == "policy.credentials_failed"
    assert r.warning[1]["attempts"] == 3


def test_a_first_failure_while_valid_is_one_warning_and_bounded_by_the_expiry() -> None:
    p = policy()
    served = Credential({"k": b"v"}, issued_at=NOW - 3000, expires_at=NOW + 20)
    r = report.failed(p, errors.ProviderUnavailable("STS down"), served, now=NOW, minted=True)
    assert reasons(r)[api.READY] == ("True", "RotationFailed")
    assert [(e.type, e.reason) for e in r.events] == [("Warning", "RotationFailed")]
    assert not r.ready_events, "the Warning says it, not also a Normal Event of the status write"
    assert r.retry_after is not None
    assert r.retry_after <= 20, "turns Expired on time"
    expired = report.failed(p, errors.ProviderUnavailable("x"), served, now=NOW + 30, minted=True)
    assert reasons(expired)[api.READY] == ("False", "Expired")


def test_an_unsupported_source_is_not_accepted() -> None:
    p = policy()
    r = report.failed(p, UnsupportedSource("cannot mint"), None, now=NOW, minted=False)
    assert reasons(r)[api.ACCEPTED] == ("False", "UnsupportedCredentialSource")
    assert r.events == (), "only a minted policy announces its first failure"


def test_a_release_failure_counts_attempts_as_a_refresh_failure_does() -> None:
    p = policy({"failedAttempts": 1})
    exc = errors.ProviderRejected("AccessDenied")
    released = report.release_failed(p, exc, now=NOW)
    refreshed = report.failed(p, exc, None, now=NOW, minted=True)
    assert released.fields == refreshed.fields
    assert reasons(released)[api.READY] == ("False", "ReleaseFailed")
    assert api.SKIP_RELEASE_ANNOTATION in released.conditions[1].message
    assert released.gauges is None
    assert released.retry_after is not None


class OrderedEvents(memapi.RecordedEvents):
    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    def event(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.order.append(f"event {reason}")
        super().event(obj, type_, reason, message)


class OrderedMetrics(CredentialMetrics):
    def __init__(self, order: list[str]) -> None:
        super().__init__(CollectorRegistry())
        self.order = order

    def served(self, request: Any, kind: str, **kw: Any) -> None:
        self.order.append("metrics")
        super().served(request, kind, **kw)


def test_the_writer_sets_metrics_then_status_then_events_and_counts_the_timer_from_the_end() -> (
    None
):
    order: list[str] = []
    clock = clocks.FakeClock(NOW)
    server = memapi.MemAPI()
    server.put(api.POLICIES, policy())
    server.intercept(
        lambda call: order.append("status") if call.verb is memapi.Verb.PATCH else None
    )
    writer = report.Writer(
        api_client=server,
        recorder=OrderedEvents(order),
        metrics=OrderedMetrics(order),
        clock=clock,
    )
    r = report.Report(
        {"failedAttempts": 0},
        (Cond(api.READY, "False", "X", "x"),),
        NOW,
        events=(Event(events.NORMAL, "Y", "y"),),
        gauges=report.Gauges(None, NOW + 100),
        renews_at=NOW + 100,
    )
    clock.advance(5)
    assert writer.carry_out(policy(), r).requeue_after == 95
    assert order == ["metrics", "status", "event X", "event Y"]
    (written,) = server.writes_to(api.POLICIES, subresource="status")
    assert written.status["conditions"][0]["reason"] == "X"
    retry = report.Report({}, (), NOW, retry_after=7.0)
    assert writer.carry_out(policy(), retry).requeue_after == 7.0, "from when it was judged"
    assert writer.carry_out(policy(), report.Report({}, (), NOW)).requeue_after is None

"""Who may read /metrics: TokenReview then SubjectAccessReview, with controller-runtime's caching,
against a fake API server that records every review it is asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from controllers.runtime import errors, metricsauth
from controllers.runtime.clock import FakeClock
from controllers.runtime.objects import Body, Resource

TOKEN = "eyJhbGciOiJSUzI1NiJ9.scraper-token-value.sig"
STRANGER = "eyJhbGciOiJSUzI1NiJ9.stranger-token-value.sig"
SCRAPER = "system:serviceaccount:monitoring:prometheus"


class FakeApiServer:
    """TokenReview and SubjectAccessReview as the API server answers them; ``failures[kind]``
    are raised, one per review of that kind, before any answer."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {
            TOKEN: {
                "username": SCRAPER,
                "uid": "uid-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            },
            STRANGER: {"username": "system:serviceaccount:default:stranger", "groups": []},
        }
        self.allowed: set[tuple[str, str, str]] = {(SCRAPER, "get", "/metrics")}
        self.failures: dict[str, list[errors.ApiError]] = {}
        self.reviews: list[tuple[str, Mapping[str, Any]]] = []

    def create(self, resource: Resource, body: Mapping[str, Any]) -> Body:
        self.reviews.append((resource.kind, body))
        if self.failures.get(resource.kind):
            raise self.failures[resource.kind].pop(0)
        spec = body["spec"]
        if resource == metricsauth.TOKENREVIEWS:
            user = self.users.get(spec["token"])
            status = {"authenticated": True, "user": user} if user else {"authenticated": False}
            return {**body, "status": status}
        assert resource == metricsauth.SUBJECTACCESSREVIEWS
        attrs = spec["nonResourceAttributes"]
        allowed = (spec["user"], attrs["verb"], attrs["path"]) in self.allowed
        return {**body, "status": {"allowed": allowed, "reason": "RBAC" if allowed else ""}}

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.reviews]


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def guard(server: FakeApiServer, clock: FakeClock, sleeps: list[float]) -> metricsauth.Filter:
    return metricsauth.Filter(server, clock=clock, sleep=sleeps.append)


def scrape(guard: metricsauth.Filter, token: str | None = TOKEN, path: str = "/metrics"):
    header = None if token is None else f"Bearer {token}"
    return guard.verdict(header, method="GET", path=path)


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token abc"]
)
def test_a_request_without_a_bearer_token_is_unauthorized_without_asking(
    guard: metricsauth.Filter, server: FakeApiServer, header: str | None
) -> None:
    assert guard.verdict(header, method="GET", path="/metrics") == metricsauth.Verdict(
        401, "Unauthorized"
    )
    assert server.reviews == []


def test_the_bearer_scheme_is_case_insensitive_as_the_api_server_reads_it() -> None:
    assert metricsauth.bearer_token("bearer abc") == "abc"
    assert metricsauth.bearer_token("BEARER abc") == "abc"
    assert metricsauth.bearer_token("Bearer  abc") is None  # empty token between two spaces


def test_a_token_the_api_server_does_not_know_is_unauthorized(
    guard: metricsauth.Filter, server: FakeApiServer
) -> None:
    assert scrape(guard, "forged") == metricsauth.Verdict(401, "Unauthorized")
    assert server.kinds() == ["TokenReview"], "no SubjectAccessReview for nobody"
    assert server.reviews[0][1]["spec"] == {"token": "forged"}, "no audiences: the API server's"


def test_a_known_user_without_the_permission_is_forbidden(
    guard: metricsauth.Filter, server: FakeApiServer
) -> None:
    verdict = scrape(guard, STRANGER)
    assert verdict == metricsauth.Verdict(
        403, "Authorization denied for user system:serviceaccount:default:stranger"
    )
    assert server.kinds() == ["TokenReview", "SubjectAccessReview"]


def test_an_allowed_user_passes_and_the_review_carries_the_whole_identity(
    guard: metricsauth.Filter, server: FakeApiServer
) -> None:
    assert scrape(guard).allowed
    _, sar = server.reviews[1]
    assert sar["spec"] == {
        "user": SCRAPER,
        "uid": "uid-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


def test_the_path_and_verb_asked_about_are_the_requests(
    guard: metricsauth.Filter, server: FakeApiServer
) -> None:
    assert scrape(guard, path="/metrics/extra").status == 403
    assert guard.verdict(f"Bearer {TOKEN}", method="POST", path="/metrics").status == 403
    asked = [b["spec"]["nonResourceAttributes"] for k, b in server.reviews if k != "TokenReview"]
    assert asked == [
        {"path": "/metrics/extra", "verb": "get"},
        {"path": "/metrics", "verb": "post"},
    ]


def test_a_steady_scraper_costs_two_reviews_then_nothing_until_the_ttls_end(
    guard: metricsauth.Filter, server: FakeApiServer, clock: FakeClock
) -> None:
    for _ in range(5):
        assert scrape(guard).allowed
        clock.advance(10)  # 40 s: within the token's minute
    assert server.kinds() == ["TokenReview", "SubjectAccessReview"]
    clock.advance(20)  # 60 s: the token is reviewed again; the allow (5 min) still holds
    assert scrape(guard).allowed
    assert server.kinds()[2:] == ["TokenReview"]
    clock.advance(240)  # 300 s after the allow
    assert scrape(guard).allowed
    assert server.kinds()[3:] == ["TokenReview", "SubjectAccessReview"]


def test_a_deny_holds_30_seconds_so_a_new_binding_takes_effect_soon(
    guard: metricsauth.Filter, server: FakeApiServer, clock: FakeClock
) -> None:
    assert scrape(guard, STRANGER).status == 403
    server.allowed.add(("system:serviceaccount:default:stranger", "get", "/metrics"))
    clock.advance(29)
    assert scrape(guard, STRANGER).status == 403, "the deny is cached"
    clock.advance(31)
    assert scrape(guard, STRANGER).allowed


def test_transient_review_failures_are_retried_with_growing_backoff(
    guard: metricsauth.Filter, server: FakeApiServer, sleeps: list[float]
) -> None:
    server.failures["TokenReview"] = [
        errors.ConnectionFailed("refused"),
        errors.TooManyRequests("slow down", status=429),
        errors.ServerError("etcd timeout", status=503),
    ]
    assert scrape(guard).allowed
    assert server.kinds() == ["TokenReview"] * 4 + ["SubjectAccessReview"]
    assert len(sleeps) == 3
    assert 0.5 <= sleeps[0] <= 0.6
    assert 0.75 <= sleeps[1] <= 0.9
    assert 1.125 <= sleeps[2] <= 1.35


def test_a_review_that_keeps_failing_is_a_500_and_is_not_cached(
    guard: metricsauth.Filter, server: FakeApiServer, sleeps: list[float]
) -> None:
    server.failures["TokenReview"] = [errors.ServerError("down", status=503) for _ in range(5)]
    with capture_logs() as logs:
        assert scrape(guard) == metricsauth.Verdict(500, "Authentication failed")
    assert len(server.reviews) == 5
    assert len(sleeps) == 4
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "metrics.authentication_failed"
    ]
    assert scrape(guard).allowed, "the failure was not remembered"


def test_the_controller_lacking_review_permission_is_a_500_at_once(
    guard: metricsauth.Filter, server: FakeApiServer, sleeps: list[float]
) -> None:
    server.failures["SubjectAccessReview"] = [
        errors.Forbidden("cannot create subjectaccessreviews", status=403)
    ]
    assert scrape(guard) == metricsauth.Verdict(500, f"Authorization for user {SCRAPER} failed")
    assert sleeps == [], "permanent: not retried"
    assert scrape(guard).allowed, "the failure was not remembered"


def test_no_token_reaches_a_log_a_reply_or_a_cache_key(
    guard: metricsauth.Filter, server: FakeApiServer
) -> None:
    with capture_logs() as logs:
        verdicts = [scrape(guard), scrape(guard, STRANGER), scrape(guard, "forged-token-value")]
        server.failures["TokenReview"] = [errors.ServerError("down", status=503)] * 5
        verdicts.append(scrape(guard, "another-token-value"))
    text = repr(logs) + repr(verdicts)
    keys = repr(list(guard.authenticator._cache._entries))
    for token in (TOKEN, STRANGER, "forged-token-value", "another-token-value"):
        assert token not in text
        assert token not in keys

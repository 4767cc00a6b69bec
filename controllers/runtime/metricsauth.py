"""Who may read ``/metrics``: the API server decides (controller-runtime's
``filters.WithAuthenticationAndAuthorization``, which kubebuilder v4 scaffolds).

A scrape must carry ``Authorization: Bearer <token>``. A TokenReview asks the API server whose
token it is; a SubjectAccessReview asks whether that user may use the request's verb on its path
as a non-resource URL — ``get`` on ``/metrics`` is what a ClusterRole with
``nonResourceURLs: [/metrics]`` grants (config/rbac/metrics_reader_role.yaml). So the endpoint is
governed by RBAC like any API, and a Pod that merely reaches the port learns nothing::

    no token, a malformed header, a token the API server does not know   → 401 Unauthorized
    a known user without the permission                                  → 403 Forbidden
    the API server unreachable, or refusing the controller's own review  → 500 (nothing served)

The controller needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``
(config/rbac/metrics_auth_role.yaml). Verdicts are cached as controller-runtime does — a token's
user for 1 minute, an allow for 5 minutes, a deny for 30 seconds — in bounded caches, so a steady
scraper costs the API server nothing after its first scrape, and junk tokens cannot grow memory.
Tokens are cached under their SHA-256 digest: no token is kept, logged, or put in a reply.
Transient review failures (connection, 429, 5xx) are retried with backoff within 10 seconds.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import structlog

from controllers.runtime import errors
from controllers.runtime.backoff import Backoff
from controllers.runtime.client import deadline
from controllers.runtime.clock import Clock, RealClock
from controllers.runtime.objects import Body, Resource
from rotator import expiring as caches

K = TypeVar("K")
V = TypeVar("V")

log = structlog.get_logger(__name__)

TOKENREVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECTACCESSREVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)


class Reviews(Protocol):
    """What is needed of the API client: creating a review (``Client.create``)."""

    def create(self, resource: Resource, body: Mapping[str, Any]) -> Body: ...


@dataclass(frozen=True)
class Options:
    """Cache lifetimes and sizes, and the time a review may take; controller-runtime's values."""

    authentication_ttl: float = 60.0
    """Seconds a token's verdict (its user, or unknown) is reused. Defaults to 1 minute."""
    allow_ttl: float = 300.0
    """Seconds an allow is reused. Defaults to 5 minutes."""
    deny_ttl: float = 30.0
    """Seconds a deny is reused: a new RoleBinding takes effect within it. Defaults to 30 s."""
    max_entries: int = 1024
    """Verdicts each cache keeps, least recently used dropped first. Defaults to 1024."""
    timeout: float = 10.0
    """Seconds one review may take, retries included. Defaults to 10."""
    attempts: int = 5
    """Tries of one review on transient errors (0.5 s backoff, x1.5, 20 % jitter). Defaults to 5."""


@dataclass(frozen=True)
class User:
    """A TokenReview's ``status.user``; hashable, so that it keys the authorization cache."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """``status`` 200 lets the request through; anything else is the reply, with ``message``."""

    status: int
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200)


class _CachedReviews(Generic[K, V]):
    """What both reviewers hold: the review API, the options, and a bounded cache of verdicts
    (each with its own time to live, set by the reviewer)."""

    def __init__(
        self,
        reviews: Reviews,
        options: Options,
        *,
        clock: Clock,
        sleep: Callable[[float], None],
    ) -> None:
        self._reviews = reviews
        self._options = options
        self._sleep = sleep
        self._cache: caches.ExpiringCache[K, V] = caches.ExpiringCache(
            options.max_entries, monotonic=clock.monotonic
        )


class Authenticator(_CachedReviews[bytes, "User | None"]):
    """Bearer token → user, by TokenReview against the API server's default audiences."""

    def authenticate(self, token: str) -> User | None:
        """The token's user; None when the API server does not authenticate it. Raises
        :class:`~.errors.ApiError` when the review itself fails."""
        digest = hashlib.sha256(token.encode()).digest()
        return self._cache.get_or_load(digest, lambda: self._review(token))

    def _review(self, token: str) -> tuple[User | None, float]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status = _create(self._reviews, TOKENREVIEWS, body, self._options, self._sleep)
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None, self._options.authentication_ttl
        extra = user.get("extra") or {}
        return User(
            name=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(user.get("groups") or ()),
            extra=tuple(sorted((k, tuple(v or ())) for k, v in extra.items())),
        ), self._options.authentication_ttl


class Authorizer(_CachedReviews["tuple[User, str, str]", "tuple[bool, str]"]):
    """(user, verb, non-resource path) → allowed, by SubjectAccessReview."""

    def authorize(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        """Whether ``user`` may ``verb`` the URL ``path``, and the API server's reason. Raises
        :class:`~.errors.ApiError` when the review itself fails."""
        return self._cache.get_or_load((user, verb, path), lambda: self._review(user, verb, path))

    def _review(self, user: User, verb: str, path: str) -> tuple[tuple[bool, str], float]:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        status = _create(self._reviews, SUBJECTACCESSREVIEWS, body, self._options, self._sleep)
        allowed = bool(status.get("allowed")) and not status.get("denied")
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        ttl = self._options.allow_ttl if allowed else self._options.deny_ttl
        return (allowed, reason), ttl


class Filter:
    """The check in front of the metrics handler: call :meth:`verdict` with the request's
    ``Authorization`` header, method and path before serving anything."""

    def __init__(
        self,
        reviews: Reviews,
        options: Options | None = None,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        options = options or Options()
        clock = clock or RealClock()
        self.authenticator = Authenticator(reviews, options, clock=clock, sleep=sleep)
        self.authorizer = Authorizer(reviews, options, clock=clock, sleep=sleep)

    def verdict(self, authorization: str | None, *, method: str, path: str) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            log.debug("metrics.unauthenticated", reason="no bearer token", path=path)
            return Verdict(401, "Unauthorized")
        try:
            user = self.authenticator.authenticate(token)
        except errors.ApiError as exc:
            log.error("metrics.authentication_failed", error=str(exc))
            return Verdict(500, "Authentication failed")
        if user is None:
            log.debug("metrics.unauthenticated", reason="token not authenticated", path=path)
            return Verdict(401, "Unauthorized")
        verb = method.lower()
        try:
            allowed, reason = self.authorizer.authorize(user, verb, path)
        except errors.ApiError as exc:
            log.error("metrics.authorization_failed", user=user.name, error=str(exc))
            return Verdict(500, f"Authorization for user {user.name} failed")
        if not allowed:
            log.debug("metrics.forbidden", user=user.name, verb=verb, path=path, reason=reason)
            return Verdict(403, f"Authorization denied for user {user.name}")
        return ALLOWED


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive), as
    the API server's bearer-token authenticator reads it; None for anything else."""
    parts = (authorization or "").strip().split(" ")
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _create(
    reviews: Reviews,
    resource: Resource,
    body: Mapping[str, Any],
    options: Options,
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    """POSTs a review and returns its ``status``, retrying transient failures; the client
    measures the overall deadline on ``time.monotonic``."""
    backoff = Backoff(0.5, options.timeout, factor=1.5, jitter=0.2)
    with deadline(time.monotonic() + options.timeout):
        attempts = max(1, options.attempts)
        for attempt in range(1, attempts + 1):
            try:
                status: dict[str, Any] = reviews.create(resource, body).get("status") or {}
            except errors.DeadlineExceeded:
                raise
            except errors.TransientApiError as exc:
                if attempt == attempts:
                    raise
                log.debug("metrics.review_retry", kind=resource.kind, error=str(exc))
                sleep(backoff.next())
            else:
                return status
    raise AssertionError("unreachable: the last attempt returns or raises")

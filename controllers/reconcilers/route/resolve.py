"""Backend → policy → credential: what a ServiceBackend name resolves to, read from the caches
once, and the rules every reader of that chain shares.

- **One policy per backend** (GEP-2648 direct policy attachment): none is valid (the backend is
  called without credentials), two or more are a conflict.
- **Ready:** the one policy's ``Ready`` condition says whether its credentials may be used. A
  policy without a ``Ready`` condition has not been reconciled yet: its verdict is
  :attr:`Standing.PENDING`, moments away. It is not Ready — no reader uses its credentials — and
  a reader that can wait for the verdict waits (the backend writes no status, a new Route waits
  out its settling time) instead of reporting a state nobody created (docs/design.md, §1).
- **Expiry:** the derived Secret's ``rotator.dev/expiration-time`` is read by
  :func:`.derived.read_time`, the one reader of a time annotation: one that does not parse
  (ValueError, OverflowError, not finite) vouches for nothing.

The ServiceBackend reconciler reports :func:`attachment`; the Route reconciler resolves each
referenced backend through :class:`Resolver` to a :class:`~.formats.base.ResolvedBackend` or
an :class:`Unresolved` reason.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from controllers.reconcilers import api, conditions, derived
from controllers.reconcilers.cache import indexes
from controllers.reconcilers.route.formats import base
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.store import Store

# --- the one-policy rule and the Ready rule ----------------------------------------------------


class Standing(enum.Enum):
    """How a backend stands with the policies that target it."""

    NO_POLICY = "no policy"
    CONFLICT = "conflict"
    PENDING = "pending"
    """One policy, without a ``Ready`` condition yet (not reconciled): not Ready."""
    NOT_READY = "not ready"
    READY = "ready"


@dataclass(frozen=True)
class Attachment:
    """The live policies targeting a backend, and what they mean for it."""

    standing: Standing
    policies: tuple[Mapping[str, Any], ...] = ()
    ready: api.Condition | None = None
    """The one policy's ``Ready`` (None unless :attr:`standing` is NOT_READY or READY)."""

    @property
    def policy(self) -> Mapping[str, Any]:
        """The one policy (not for NO_POLICY or CONFLICT)."""
        return self.policies[0]


def policies_for(policies: Store, backend_key: str) -> list[dict[str, Any]]:
    """The live policies that target a backend."""
    return [
        p
        for p in policies.by_index(indexes.POLICY_BY_BACKEND, backend_key)
        if not objects.is_being_deleted(p)
    ]


def attachment(policies: Store, backend_key: str) -> Attachment:
    """The one-policy and Ready rules for the backend ``backend_key``."""
    found = tuple(policies_for(policies, backend_key))
    if not found:
        return Attachment(Standing.NO_POLICY)
    if len(found) > 1:
        return Attachment(Standing.CONFLICT, found)
    ready = conditions.of(found[0], api.READY)
    if ready is None:
        return Attachment(Standing.PENDING, found)
    standing = Standing.READY if ready.get("status") == "True" else Standing.NOT_READY
    return Attachment(standing, found, ready)


# --- settling ----------------------------------------------------------------------------------

SETTLE_SECONDS = 2.0
"""How long after its creation a ServiceBackend or Route that has no status yet waits for the
objects applied with it to reach the cache, rather than report them missing (``NoPolicy``,
``BackendNotFound``) and then, a moment later, resolved: one status write instead of two, and no
Event for a state nobody created. creationTimestamp has whole seconds, so the wait is 1 to 2 s."""


def settling(obj: Mapping[str, Any], now: float) -> float:
    """Seconds left of ``obj``'s :data:`SETTLE_SECONDS`; 0 once it has a status, once the time
    is up, and when its creationTimestamp is missing, unreadable or ahead of ``now`` (a clock
    behind the API server's: never wait on a skew)."""
    md = objects.meta(obj)
    if obj.get("status") or not md.get("creationTimestamp"):
        return 0.0
    try:
        age = now - clocks.parse_rfc3339(md["creationTimestamp"])
    except ValueError:
        return 0.0
    return SETTLE_SECONDS - age if 0.0 <= age < SETTLE_SECONDS else 0.0


# --- the credential as text ----------------------------------------------------------------------


class InvalidCredentials(ValueError):
    """A derived credential that cannot go into a text configuration. The message names the key
    and the problem, never a byte of the value."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"key {key!r} {problem}")
        self.key = key


def credentials_text(data: Mapping[str, str]) -> dict[str, str]:
    """A derived Secret's ``data`` (base64 values) as text; raises :class:`InvalidCredentials`
    for the first key (in sorted order) whose value is not base64 or not UTF-8."""
    out: dict[str, str] = {}
    for key in sorted(data):
        try:
            raw = base64.b64decode(data[key], validate=True)
        except ValueError:  # binascii.Error included
            raise InvalidCredentials(key, "is not base64") from None
        try:
            out[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials(key, "is not UTF-8 text") from None
    return out


# --- a Route's backend ---------------------------------------------------------------------------


class Unresolved(Exception):
    """Why a referenced backend is left out of the configuration: a ``ResolvedRefs`` reason, and
    a message naming it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Chain:
    """What backend :attr:`name` resolves from, each read from its cache once: the backend, its
    :class:`Attachment` (None without a backend) and, of a Ready policy, the derived Secret."""

    name: str
    backend: Mapping[str, Any] | None
    attachment: Attachment | None
    secret: Mapping[str, Any] | None

    def arriving(self) -> bool:
        """Whether what the backend resolves from may still be on its way to the cache: the
        backend, its policy, that policy's first ``Ready``, or the derived Secret of a Ready
        policy. A new route waits (:func:`settling`) instead of writing a configuration without
        the backend and, a moment later, with it."""
        if self.attachment is None:
            return True
        match self.attachment.standing:
            case Standing.NO_POLICY | Standing.PENDING:
                return True
            case Standing.READY:
                return self.secret is None
        return False  # several: a conflict, not a delay; not Ready: a verdict, not a delay

    def resolve(self, now: float) -> tuple[base.ResolvedBackend, float | None]:
        """The backend with its credentials, and when they expire; raises :class:`Unresolved`."""
        name, backend, attached = self.name, self.backend, self.attachment
        if backend is None or attached is None or objects.is_being_deleted(backend):
            raise Unresolved(api.REASON_BACKEND_NOT_FOUND, f"ServiceBackend {name} not found")
        spec = cast(api.BackendSpec, backend["spec"])
        if attached.standing is Standing.NO_POLICY:
            return base.ResolvedBackend(name, spec, None), None
        if attached.standing is Standing.CONFLICT:
            raise Unresolved(
                api.REASON_POLICY_CONFLICT,
                f"ServiceBackend {name} is targeted by several policies",
            )
        policy = attached.policy
        policy_name = objects.name(policy)
        if attached.standing is not Standing.READY:
            raise Unresolved(
                api.REASON_POLICY_NOT_READY, f"BackendSecurityPolicy {policy_name} is not ready"
            )
        secret_name = api.derived_secret_name(policy_name)
        if self.secret is None:
            raise Unresolved(
                api.REASON_POLICY_NOT_READY, f"credentials of {policy_name} not written yet"
            )
        where = (
            f"ServiceBackend {name}: Secret {secret_name} of BackendSecurityPolicy {policy_name}"
        )
        expires = (objects.meta(self.secret).get("annotations") or {}).get(
            api.EXPIRATION_ANNOTATION
        )
        expiry = None if expires is None else derived.read_time(expires)
        if expires is not None and expiry is None:
            raise Unresolved(
                api.REASON_INVALID_CREDENTIALS,
                f"{where}: annotation {api.EXPIRATION_ANNOTATION} is not an RFC 3339 time",
            )
        if expiry is not None and expiry <= now:
            raise Unresolved(
                api.REASON_CREDENTIALS_EXPIRED,
                f"credentials of {policy_name} expired at {expires}",
            )
        try:
            data = credentials_text(self.secret.get("data") or {})
        except InvalidCredentials as exc:
            raise Unresolved(api.REASON_INVALID_CREDENTIALS, f"{where}: {exc}") from None
        # The header comes from the spec, not the derived Secret: changing it bumps the
        # policy's generation, which wakes the Route, and needs no new credential.
        credentials = base.ResolvedCredentials(
            policy_name,
            str(policy["spec"]["type"]),
            data,
            expires,
            header=base.api_key_header(policy["spec"]),
            gcp=base.gcp_location(policy["spec"]),
        )
        return base.ResolvedBackend(name, spec, credentials), expiry


class Resolver:
    """Reads a backend's :class:`Chain` from the caches of the chain."""

    def __init__(self, *, backends: Store, policies: Store, managed_secrets: Store) -> None:
        self._backends = backends
        self._policies = policies
        self._managed = managed_secrets

    def chain(self, namespace: str, name: str) -> Chain:
        key = objects.make_key(namespace, name)
        backend = self._backends.get(key)
        if backend is None:
            return Chain(name, None, None, None)
        attached = attachment(self._policies, key)
        secret = None
        if attached.standing is Standing.READY:
            secret_name = api.derived_secret_name(objects.name(attached.policy))
            secret = self._managed.get(objects.make_key(namespace, secret_name))
        return Chain(name, backend, attached, secret)


@dataclass(frozen=True)
class Resolution:
    """Every referenced backend, resolved or not."""

    backends: dict[str, base.ResolvedBackend]
    problems: dict[str, Unresolved]
    expiries: list[float]
    """When each inlined credential expires (the reconcile runs again at the earliest)."""


def resolve_all(chains: Mapping[str, Chain], now: float) -> Resolution:
    """:meth:`Chain.resolve` of each, in order."""
    out = Resolution({}, {}, [])
    for name, chain in chains.items():
        try:
            out.backends[name], expiry = chain.resolve(now)
        except Unresolved as exc:
            out.problems[name] = exc
            continue
        if expiry is not None:
            out.expiries.append(expiry)
    return out

"""``rotator renew bsp/NAME [--wait]``: ask for a new credential now (cmctl's ``renew``), and
with ``--wait`` stay until it is served.

The request is the documented annotation ``rotator.dev/rotate-requested-at``, set to the time of
the request (RFC 3339 with microseconds, so no two requests share a value); rotator answers it
by minting a credential and records the value it answered in the derived Secret's
``rotator.dev/answered-rotate-request``. ``--wait`` reads that annotation (metadata only: never
the Secret's data) until it holds this request's value, and prints how long that took. It fails
at once when a refresh after the request fails for a reason no retry gets past
(:data:`~controllers.commands.policyview.TRANSIENT_READY_REASONS` says which do), and at the
deadline otherwise, naming the last failure. A policy that copies its credential has nothing to
renew and is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from controllers.commands import humanize, policyview
from controllers.commands.errors import CommandError
from controllers.commands.target import Target
from controllers.reconcilers import api
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from controllers.runtime.objects import Body

FIELD_MANAGER = "rotator-cli"


@dataclass(frozen=True)
class RenewOptions:
    wait: bool = False
    """Stay until the new credential is served. Defaults to False: request and return."""
    timeout: float = 120.0
    """Seconds ``--wait`` waits. Defaults to 2 minutes."""
    interval: float = 0.25
    """Seconds between two reads while waiting (two metadata GETs). Defaults to 0.25."""


def request_value(now: float) -> str:
    """The annotation value of a request made at ``now``: RFC 3339 UTC, microseconds."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renew(
    target: Target,
    options: RenewOptions,
    *,
    clock: clocks.Clock,
    sleep: Callable[[float], None],
    out: TextIO,
    err: TextIO,
) -> None:
    """Requests a rotation of ``target`` (and waits for it); raises :class:`CommandError`."""
    policy = _get_policy(target)
    if objects.is_being_deleted(policy):
        raise CommandError(f"{target} is being deleted: there is nothing to renew")
    spec = policy.get("spec") or {}
    if policyview.copies(spec):
        raise CommandError(
            f"{target} copies its credential from a Secret ({spec.get('type')}): there is "
            "nothing to renew; rotator serves the Secret's new content as soon as it changes"
        )
    value = request_value(clock.now())
    before = policyview.Attempts.of(policy)
    target.client.patch(
        api.POLICIES,
        target.name,
        {"metadata": {"annotations": {api.ROTATE_REQUESTED_ANNOTATION: value}}},
        namespace=target.namespace,
        field_manager=FIELD_MANAGER,
    )
    started = clock.monotonic()
    print(f"rotation requested: {target} ({api.ROTATE_REQUESTED_ANNOTATION}={value})", file=out)
    if not options.wait:
        return
    secret_name = policyview.derived_secret_name(policy)
    last: policyview.Failure | None = None
    while True:
        try:
            served = _served(target, secret_name)
            if served is not None and served.answered_request == value:
                took = clock.monotonic() - started
                print(_renewed(target, served, took, clock.now()), file=out)
                return
            failure = policyview.failure_since(before, _get_policy(target))
        except errors.TransientApiError as exc:  # a blip of the API server: read again
            print(f"rotator: reading {target} failed, retrying: {exc}", file=err)
            failure = None
        if failure is not None and failure.permanent:
            raise CommandError(f"renewal of {target} failed: {failure}")
        if failure is not None and (last is None or failure.reason != last.reason):
            print(f"rotator: a refresh failed, rotator retries it: {failure}", file=err)
        last = failure or last
        elapsed = clock.monotonic() - started
        if elapsed >= options.timeout:
            why = (
                f"; last failure: {last}"
                if last
                else "; no failure was reported (is rotator running, and watching this namespace?)"
            )
            raise CommandError(
                f"timed out after {humanize.seconds(options.timeout)} waiting for {target} to "
                f"serve a new credential{why}"
            )
        sleep(min(options.interval, options.timeout - elapsed))


def _get_policy(target: Target) -> Body:
    try:
        return target.client.get(api.POLICIES, target.name, namespace=target.namespace)
    except errors.NotFound:
        raise CommandError(
            f'backendsecuritypolicy "{target.name}" not found in namespace "{target.namespace}"'
        ) from None


def _served(target: Target, name: str) -> policyview.Served | None:
    try:
        secret = target.client.get(
            objects.SECRETS, name, namespace=target.namespace, metadata_only=True
        )
    except errors.NotFound:
        return None
    return policyview.Served.of(secret)


def _renewed(target: Target, served: policyview.Served, took: float, now: float) -> str:
    times = [f"issued {humanize.timestamp(served.issued_at, now)}"] if served.issued_at else []
    if served.expires_at:
        times.append(f"expires {humanize.timestamp(served.expires_at, now)}")
    return (
        f"renewed in {humanize.seconds(took)}: {target} serves a new credential in Secret "
        f"{served.name}" + (f", {', '.join(times)}" if times else "")
    )

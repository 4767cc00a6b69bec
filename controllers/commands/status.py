"""``rotator status bsp/NAME``: one policy as a person debugging it wants to see it (cmctl's
``status certificate``): which replica serves it (and its shard, :mod:`.servedby`), its
conditions, when the served credential was issued, expires and is renewed, the last failure, the
derived Secret (name and keys, never data), the ServiceBackends it targets, the Routes that embed
it, and its recent Events.

:func:`read` makes the API calls; :func:`render` is a pure function of what was read and the
time, so the text is unit-tested. A related object that cannot be read (RBAC, say) is noted in
its section; only the policy itself must be readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controllers.commands import humanize, policyview, servedby
from controllers.commands.target import Target
from controllers.reconcilers import api, conditions
from controllers.reconcilers.cache import indexes
from controllers.runtime import errors, objects
from controllers.runtime.objects import Body

MAX_EVENTS = 10


@dataclass(frozen=True)
class Snapshot:
    """What ``rotator status`` read. ``unreadable`` maps a section to why it could not be read."""

    policy: Body
    served: policyview.Served | None
    targets: list[tuple[str, Body | None]]
    """Each ServiceBackend named in ``targetRefs``, None when it does not exist."""
    routes: list[Body]
    events: list[Body]
    leases: servedby.Leases
    """The controller's Leases: who serves the policy."""
    unreadable: dict[str, str] = field(default_factory=dict)


def read(target: Target, leases: servedby.LeaseOptions) -> Snapshot:
    """Reads the policy (raising :class:`~controllers.runtime.errors.NotFound` when it does not
    exist), what relates to it, and the controller's Leases in ``leases``."""
    policy = target.client.get(api.POLICIES, target.name, namespace=target.namespace)
    reads = _Reads(target)
    secret = reads.one("derived Secret", objects.SECRETS, policyview.derived_secret_name(policy))
    served = policyview.Served.of(secret) if secret is not None else None
    del secret  # only the name, annotations and key names are kept
    wanted = set(indexes.policy_backends(policy))  # what the route reconciler's index says
    targets = [
        (name, reads.one("targets", api.BACKENDS, name))
        for name in sorted(objects.split_key(objects.ObjectKey(k))[1] for k in wanted)
    ]
    routes = [
        r for r in reads.many("routes", api.ROUTES) if wanted & set(indexes.route_backends(r))
    ]
    md = objects.meta(policy)
    selector = (
        f"involvedObject.kind={api.POLICIES.kind},involvedObject.name={md.get('name', '')},"
        f"involvedObject.uid={md.get('uid', '')}"
    )
    events = reads.many("events", objects.EVENTS, field_selector=selector)
    return Snapshot(
        policy,
        served,
        targets,
        sorted(routes, key=objects.name),
        sorted(events, key=_event_time)[-MAX_EVENTS:],
        servedby.read(target.client, leases),
        reads.unreadable,
    )


class _Reads:
    """Reads of related objects, which may fail without failing the command: a failure is
    noted against its section (``unreadable``), a missing object is None."""

    def __init__(self, target: Target) -> None:
        self._client = target.client
        self._ns = target.namespace
        self.unreadable: dict[str, str] = {}

    def one(self, section: str, resource: objects.Resource, name: str) -> Body | None:
        try:
            return self._client.get(resource, name, namespace=self._ns)
        except errors.NotFound:
            return None
        except errors.ApiError as exc:
            self.unreadable[section] = str(exc)
            return None

    def many(
        self, section: str, resource: objects.Resource, *, field_selector: str | None = None
    ) -> list[Body]:
        try:
            listed = self._client.list(resource, namespace=self._ns, field_selector=field_selector)
        except errors.ApiError as exc:
            self.unreadable[section] = str(exc)
            return []
        return list(listed.get("items") or [])


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or objects.meta(event).get("creationTimestamp")
        or ""
    )


# --- rendering ---------------------------------------------------------------------------------


def render(snapshot: Snapshot, now: float) -> str:
    """The text ``rotator status`` prints, for a snapshot read at ``now``."""
    policy = snapshot.policy
    spec: Mapping[str, Any] = policy.get("spec") or {}
    md = objects.meta(policy)
    kind = str(spec.get("type", ""))
    how = "copied" if policyview.copies(spec) else "minted"
    source = policyview.source_of(spec)
    lines = humanize.fields(
        [
            ("Name", md.get("name", "")),
            ("Namespace", md.get("namespace", "")),
            ("Type", f"{kind} ({f'{source}, ' if source else ''}{how})"),
            ("Created", humanize.timestamp(md.get("creationTimestamp"), now)),
            *(
                [("Deleting", humanize.timestamp(md.get("deletionTimestamp"), now))]
                if md.get("deletionTimestamp")
                else []
            ),
            ("Targets", _targets(snapshot)),
            *servedby.rows(snapshot.leases, str(md.get("namespace", "")), now),
        ]
    )
    lines += ["Conditions:", *_conditions(policy, now)]
    lines += ["Credential:", *_credential(snapshot, now)]
    lines += ["Routes:", *_routes(snapshot)]
    lines += ["Events:", *_events(snapshot, now)]
    return "\n".join(lines) + "\n"


def _unreadable(snapshot: Snapshot, section: str) -> list[str]:
    why = snapshot.unreadable.get(section)
    return [f"  <cannot read {section}: {why}>"] if why else []


def _targets(snapshot: Snapshot) -> str:
    if "targets" in snapshot.unreadable:
        return f"<cannot read: {snapshot.unreadable['targets']}>"
    shown = []
    for name, backend in snapshot.targets:
        if backend is None:
            shown.append(f"ServiceBackend {name} (not found)")
            continue
        resolved = conditions.of(backend, api.RESOLVED_REFS)
        state = f"{api.RESOLVED_REFS}={_brief(resolved)}" if resolved else "not reconciled yet"
        shown.append(f"ServiceBackend {name} ({state})")
    return ", ".join(shown) or "<none>"


def _brief(condition: Mapping[str, Any] | None) -> str:
    """``True``, or ``False PolicyNotReady``: the reason when it is not the expected one."""
    if condition is None:
        return "-"
    status, reason = str(condition.get("status", "")), str(condition.get("reason", ""))
    return status if status == "True" else f"{status} {reason}".strip()


def _conditions(policy: Mapping[str, Any], now: float) -> list[str]:
    found = (policy.get("status") or {}).get("conditions") or []
    if not found:
        return ["  <none: not reconciled yet>"]
    rows = [
        (
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason", "")),
            humanize.timestamp(c.get("lastTransitionTime"), now),
            str(c.get("message", "")),
        )
        for c in found
    ]
    return humanize.table(("TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"), rows)


def _credential(snapshot: Snapshot, now: float) -> list[str]:
    policy, served = snapshot.policy, snapshot.served
    status = policy.get("status") or {}
    name = policyview.derived_secret_name(policy)
    if served is not None:
        secret = f"{served.name} (keys: {', '.join(served.keys) or '<none>'})"
    elif "derived Secret" in snapshot.unreadable:
        secret = f"{name} <cannot read: {snapshot.unreadable['derived Secret']}>"
    else:
        secret = f"{name} (not written yet)"
    # the served credential's own times, from its Secret; the status when it cannot be read
    issued = (served.issued_at if served else None) or status.get("lastRotationTime")
    expires = (served.expires_at if served else None) or status.get("expirationTime")
    spec: Mapping[str, Any] = policy.get("spec") or {}
    if policyview.copies(spec):
        renewal = "- (copied: follows its Secret, whenever it changes)"
    else:
        renewal = humanize.timestamp(status.get("renewalTime"), now)
    annotations = objects.meta(policy).get("annotations") or {}
    requested = annotations.get(api.ROTATE_REQUESTED_ANNOTATION)
    if not requested:
        request = "-"
    elif served is not None and served.answered_request == requested:
        request = f"{requested} (answered)"
    else:
        request = f"{requested} (not answered yet)"
    return humanize.fields(
        [
            ("Secret", secret),
            ("Issued", humanize.timestamp(issued, now)),
            ("Expires", humanize.timestamp(expires, now) if expires else "never"),
            ("Next renewal", renewal),
            ("Failed attempts", str(int(status.get("failedAttempts") or 0))),
            ("Last failure", humanize.timestamp(status.get("lastFailureTime"), now)),
            ("Rotation request", request),
        ],
        indent=2,
    )


def _routes(snapshot: Snapshot) -> list[str]:
    if "routes" in snapshot.unreadable:
        return _unreadable(snapshot, "routes")
    if not snapshot.routes:
        return ["  <none>"]
    rows = [
        (
            objects.name(r),
            _brief(conditions.of(r, api.RESOLVED_REFS)),
            _brief(conditions.of(r, api.PROGRAMMED)),
            api.route_config_secret_name(objects.name(r)),
        )
        for r in snapshot.routes
    ]
    return humanize.table(("NAME", "RESOLVEDREFS", "PROGRAMMED", "CONFIG SECRET"), rows)


def _events(snapshot: Snapshot, now: float) -> list[str]:
    if "events" in snapshot.unreadable:
        return _unreadable(snapshot, "events")
    if not snapshot.events:
        return ["  <none>"]
    rows = [
        (
            _event_age(e, now),
            str(e.get("type", "")),
            str(e.get("reason", "")),
            str((e.get("source") or {}).get("component") or e.get("reportingController") or ""),
            str(e.get("message", "")),
        )
        for e in snapshot.events
    ]
    return humanize.table(("LAST SEEN", "TYPE", "REASON", "FROM", "MESSAGE"), rows)


def _event_age(event: Mapping[str, Any], now: float) -> str:
    """``3m``, or ``3m (x4 over 10m)`` for a repeated Event, as ``kubectl describe`` says it."""
    last = humanize.age(_event_time(event), now)
    count = int(event.get("count") or 1)
    first = event.get("firstTimestamp")
    if count > 1 and first:
        return f"{last} (x{count} over {humanize.age(first, now)})"
    return last

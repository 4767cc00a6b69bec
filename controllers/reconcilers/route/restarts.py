"""Rolling out the workloads that read a route configuration only when they start
(``spec.rolloutRestartTargets``, Vault Secrets Operator's habit), those that opted in.

A gateway that loads ``config.yaml`` once at start never sees a rewritten configuration. After
the Route reconciler has written one, this module sets the pod-template annotation
``config-hash.rotator.dev/<route>`` of each target (a Deployment, StatefulSet or DaemonSet of
the Route's namespace) to the configuration's hash, by a JSON Patch (RFC 6902) of that one
annotation: a changed pod template is exactly what ``kubectl rollout restart`` changes, so the
workload's own controller replaces its pods under its own update strategy. The value is the hash,
not a time (kubectl's ``kubectl.kubernetes.io/restartedAt``, VSO's
``vso.secrets.hashicorp.com/restartedAt``): a repeated patch — a retry after a failed status
write, a new leader — changes nothing, so one configuration is rolled out at most once.

Level-triggered: whether to roll out is decided from state alone — the hash the Route's
``status.rolloutRestart.configHash`` records (the configuration last rolled out, or the first
one), the hash just written, and whether the last attempt was incomplete (``RolloutRestarted``
False). A resync, a restart of the controller or a no-op reconcile sends nothing. Only timing is
kept in memory: when the debounce window opened (a restarted controller opens it again, so a
rollout may come one window later, never twice) and the retry backoff of a failed attempt.

Decisions, stated once:

* The workload opts in: its owner puts the annotation on its pod template first
  (``config-hash.rotator.dev/<route>``, any value). rotator's RBAC allows ``patch`` on every
  workload of every namespace, and a Route's author need not hold any right on workloads: without
  the opt-in, whoever may write a Route could roll out (restart) any Deployment, StatefulSet or
  DaemonSet of its namespace through rotator — a capability nobody gave them. With it, only
  workloads whose owner (who may edit the pod template) named this Route are touched, and only
  that annotation's value.
* The opt-in check and the write are one request: the patch is ``remove`` then ``add`` of the
  annotation. RFC 6902 applies a patch's operations all or none, and ``remove`` fails when the
  key is absent, so a workload without the opt-in is refused (HTTP 422, ``Invalid``) and left
  unchanged, and one with it gets the hash — no window between a check and the write in which
  the owner could withdraw the opt-in. Not a single ``replace``, which RFC 6902 also makes fail
  on a missing key: the API server applies JSON patches with evanphx/json-patch v4, whose
  ``replace`` adds a key missing from an existing map (kube-apiserver 1.36, checked): it would
  refuse only a template with no annotation at all and roll out one carrying any other.
* No ``get`` on workloads, hence no read-then-write: reading Deployments, StatefulSets and
  DaemonSets in every namespace would expose their pod specs, environment values included. The
  answer to a successful patch is the object; rotator keeps and logs nothing of it.
* Any ``Invalid`` answer is taken for a missing opt-in, without reading the message: the API
  server's Status for a patch that does not apply carries no cause (an empty ``details``) and a
  generic message, the same whether the annotation or the whole ``annotations`` map is missing.
  The object's validation answers ``Invalid`` too — which the one annotation rotator changes can
  hardly cause (the 256 KiB limit on a template's annotations) — and so does, by default, a
  ValidatingAdmissionPolicy that denies the change: the condition quotes the API server's
  message, which then says why (the client keeps no ``details``, which would tell them apart).
* The first configuration a Route gets (no record yet) is recorded, nothing is restarted: no
  workload consumed an earlier one. Adding targets to a Route records the current configuration
  the same way; they are rolled out at its next change.
* Debounced: the first change not yet rolled out opens a window of :data:`DEBOUNCE_SECONDS`;
  changes within it are folded into one rollout, of the configuration current when it closes
  (at most one rollout per window, and never more than a window late).
* A target that does not exist (yet) is a ``RolloutRestarted=False`` condition, reason
  ``TargetNotFound``, and a Warning Event, not an error; one that has not opted in (yet) the same
  with reason ``RestartNotPermitted``, its message naming the annotation to add. The others are
  rolled out, and the attempt is retried with backoff (:data:`RETRY_BASE_SECONDS` doubling to
  :data:`RETRY_MAX_SECONDS`) until the target exists and opted in: a target that opts in while a
  rollout is pending gets it. Any other refusal (RBAC) is reason ``RestartFailed``, retried the
  same way; a transient error is raised, for the controller's backoff. One reason when several
  apply, in that order (the message lists every target left out); the Event only when the
  condition changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

import structlog

from controllers.reconcilers import api, conditions
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.metrics import RouteMetrics
from controllers.runtime import apiclient, events, eventsink, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime.objects import Resource
from rotator import schedule

log = structlog.get_logger(__name__)

DEBOUNCE_SECONDS = 10.0
"""Seconds from the first configuration change not yet rolled out to the rollout: changes within
them cost one rollout. Long enough to fold a burst (a policy rotating the credentials of several
backends of one Route), short next to the minutes a rollout takes."""
RETRY_BASE_SECONDS = 1.0
"""First retry of a failed rollout (a missing target); doubles per failure."""
RETRY_MAX_SECONDS = 300.0
"""Longest wait between retries of a failed rollout: a target created (or opted in) later is rolled
out at most this late (rotator does not watch workloads: RBAC gives it ``patch`` on them, nothing
else)."""
MAX_PENDING = 65536
"""Routes whose timing is remembered; the oldest are forgotten beyond (their window reopens)."""

WORKLOADS: Mapping[str, Resource] = {
    "Deployment": Resource("apps", "v1", "deployments", "Deployment"),
    "StatefulSet": Resource("apps", "v1", "statefulsets", "StatefulSet"),
    "DaemonSet": Resource("apps", "v1", "daemonsets", "DaemonSet"),
}
"""The kinds ``rolloutRestartTargets`` may name (the CRD's enum) and where they are patched."""


def template_annotation(route_name: str) -> str:
    """The pod-template annotation that carries ``route_name``'s configuration hash: one key per
    Route, so several Routes rolling out one gateway do not overwrite each other's value.

    An annotation's name part holds 63 characters, a Route's name 239: a name that does not fit
    is replaced by ``sha256-<first 40 hex digits of its hash>`` (:func:`api.fit_name`, as the
    owner label of a Secret rotator writes).
    """
    return api.ROLLOUT_ANNOTATION_PREFIX + api.fit_name(route_name)


def pointer_token(key: str) -> str:
    """``key`` as one reference token of a JSON Pointer (RFC 6901 section 3): ``~`` is ``~0``, ``/``
    is ``~1``, in that order (the other way round ``/`` would end up ``~01``)."""
    return key.replace("~", "~0").replace("/", "~1")


TEMPLATE_ANNOTATIONS = "/spec/template/metadata/annotations"
"""The JSON Pointer of a workload's pod-template annotations."""


def restart_patch(route_name: str, config_hash: str) -> list[dict[str, str]]:
    """The JSON Patch that rolls an opted-in workload out for ``config_hash``: ``remove`` of
    :func:`template_annotation` — which fails, and with it the whole patch, when the workload's
    owner has not put it there — then ``add`` of it with the hash. It touches nothing else."""
    path = f"{TEMPLATE_ANNOTATIONS}/{pointer_token(template_annotation(route_name))}"
    return [{"op": "remove", "path": path}, {"op": "add", "path": path, "value": config_hash}]


class Action(Enum):
    FIRST = "first"
    """No configuration recorded yet: record this one, restart nothing."""
    UP_TO_DATE = "up-to-date"
    """The targets were rolled out for this configuration: nothing to send."""
    WAIT = "wait"
    """A rollout is due later (debounce window, retry backoff)."""
    RESTART = "restart"
    """Roll the targets out now."""


@dataclass(frozen=True)
class Decision:
    action: Action
    wait: float = 0.0
    """Seconds until the rollout is due, for :attr:`Action.WAIT`."""


def decide(
    *, recorded: str | None, current: str, incomplete: bool, due: float, now: float
) -> Decision:
    """What to do for a Route whose configuration ``current`` was just written, ``recorded`` is
    the hash its status records and ``incomplete`` says the last attempt left targets out
    (``RolloutRestarted=False``); a rollout not before ``due`` (monotonic seconds, like ``now``).

    An incomplete attempt is finished even when the configuration went back to the recorded one:
    the targets it did reach run the configuration it was made for.
    """
    if recorded is None and not incomplete:
        return Decision(Action.FIRST)
    if recorded == current and not incomplete:
        return Decision(Action.UP_TO_DATE)
    if now < due:
        return Decision(Action.WAIT, due - now)
    return Decision(Action.RESTART)


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt after ``failures`` failed ones in a row (1 or more):
    :func:`rotator.schedule.doubling`."""
    return schedule.doubling(RETRY_BASE_SECONDS, RETRY_MAX_SECONDS, failures)


@dataclass
class _Timing:
    """One Route's rollout timing, in monotonic seconds; never decides *whether* to roll out."""

    opened: float
    failures: int = 0
    next_attempt: float = 0.0
    targets: tuple[tuple[str, str], ...] = ()
    """The targets of the last failed attempt: an edited list is tried at once."""


@dataclass(frozen=True)
class Outcome:
    """What the Route reconcile writes for its targets: status fields, condition updates and
    condition types to remove, and when to look again."""

    fields: dict[str, Any] = field(default_factory=dict)
    updates: list[conditions.Cond] = field(default_factory=list)
    drop: tuple[str, ...] = ()
    requeue_after: float | None = None


class RolloutRestarts:
    """Rolls out a Route's ``rolloutRestartTargets`` after its configuration changed."""

    def __init__(
        self,
        api_client: apiclient.Writer,
        recorder: eventsink.EventSink,
        clock: clocks.Clock,
        *,
        window: float = DEBOUNCE_SECONDS,
        max_pending: int = MAX_PENDING,
        metrics: RouteMetrics | None = None,
    ) -> None:
        self._api = api_client
        self._metrics = metrics
        self._recorder = recorder
        self._clock = clock
        self._window = window
        self._max = max_pending
        self._lock = threading.Lock()
        self._timing: OrderedDict[str, _Timing] = OrderedDict()

    def reconcile(self, route: api.Route, config_hash: str | None) -> Outcome:
        """Decides and acts for ``route``, whose configuration Secret holds ``config_hash`` (None
        when it could not be written: nothing is rolled out for a configuration not in place).

        Raises the API error of a transient failure (retried with the controller's backoff);
        every other outcome is in the returned :class:`Outcome`.

        ``rotator_route_rollouts_pending`` follows: 1 while a rollout is due (the debounce window,
        the backoff of an attempt that left targets out) or the last attempt left targets out,
        0 once the targets run the configuration in the Secret (or its first one); no series for
        a Route without targets.
        """
        targets = route["spec"].get("rolloutRestartTargets") or []
        uid = objects.meta(route).get("uid") or str(objects.key_of(route))
        previous = conditions.of(route, api.ROLLOUT_RESTARTED)
        incomplete = previous is not None and previous["status"] == "False"
        if not targets:
            self._forget(uid)
            self.forget_route(objects.namespace(route), objects.name(route))
            return Outcome(drop=(api.ROLLOUT_RESTARTED,) if previous else ())
        record = cast(dict[str, Any], (route.get("status") or {}).get("rolloutRestart") or {})
        kept = {"rolloutRestart": dict(record)} if record else {}
        if config_hash is None:  # nothing new in the Secret: as the last attempt left it
            self._pending(route, incomplete)
            return Outcome(fields=kept)
        now = self._clock.monotonic()
        timing = self._timing_of(uid, now)
        listed = tuple((t["kind"], t["name"]) for t in targets)
        due = timing.opened + self._window
        if timing.failures and timing.targets == listed:
            due = max(due, timing.next_attempt)
        decision = decide(
            recorded=record.get("configHash"),
            current=config_hash,
            incomplete=incomplete,
            due=due,
            now=now,
        )
        short = config_hash[:12]
        match decision.action:
            case Action.FIRST:
                self._forget(uid)
                self._pending(route, False)
                return Outcome(
                    fields={"rolloutRestart": {"configHash": config_hash}},
                    updates=[
                        true(
                            api.ROLLOUT_RESTARTED,
                            api.REASON_FIRST_CONFIGURATION,
                            f"nothing restarted: configuration {short} is the first, which the "
                            "targets load when they start; its changes will roll them out",
                        )
                    ],
                )
            case Action.UP_TO_DATE:
                self._forget(uid)
                self._pending(route, False)
                return Outcome(fields=kept)
            case Action.WAIT:
                self._pending(route, True)
                return Outcome(fields=kept, requeue_after=decision.wait)
        self._pending(route, True)  # until every target took it (a transient error leaves it 1)
        return self._restart(
            route, targets, config_hash, kept=kept, previous=previous, uid=uid, now=now
        )

    def _restart(
        self,
        route: api.Route,
        targets: Sequence[api.RolloutRestartTarget],
        config_hash: str,
        *,
        kept: dict[str, Any],
        previous: api.Condition | None,
        uid: str,
        now: float,
    ) -> Outcome:
        name, namespace = objects.name(route), objects.namespace(route)
        short = config_hash[:12]
        patch = restart_patch(name, config_hash)
        annotation = template_annotation(name)
        missing: list[str] = []
        not_opted_in: list[str] = []
        refused: list[str] = []
        for target in targets:
            what = f"{target['kind']} {target['name']}"
            resource = WORKLOADS.get(target["kind"])
            if resource is None:  # the CRD's enum refuses it; an older CRD might not
                refused.append(f"{what}: not a kind rotator rolls out")
                continue
            try:
                self._api.patch(
                    resource,
                    target["name"],
                    patch,
                    namespace=namespace,
                    patch_type=clients.PatchType.JSON,
                    field_manager=api.FIELD_MANAGER,
                )
            except api_errors.NotFound:
                self._rolled_out(target["kind"], ok=False)
                missing.append(what)
                continue
            except api_errors.Invalid as exc:  # the patch did not apply: no opt-in (docstring)
                self._rolled_out(target["kind"], ok=False)
                not_opted_in.append(
                    f"{what} has not opted in: its owner adds the annotation {annotation} (any "
                    "value) to its pod template, spec.template.metadata.annotations (the API "
                    f"server: {str(exc.args[0])[:256]})"
                )
                continue
            except api_errors.ApiError as exc:
                self._rolled_out(target["kind"], ok=False)
                if exc.transient:
                    raise
                refused.append(f"{what}: {str(exc)[:512]}")
                continue
            self._rolled_out(target["kind"], ok=True)
            log.info(
                "route.rollout_restarted",
                target_kind=target["kind"],
                target_name=target["name"],
                config_hash=short,
            )
        if not missing and not not_opted_in and not refused:
            self._forget(uid)
            self._pending(route, False)
            done = ", ".join(f"{t['kind']} {t['name']}" for t in targets)
            message = f"rolled out {done} for configuration {short}"
            self._recorder.event(route, events.NORMAL, api.REASON_RESTARTED, message)
            return Outcome(
                fields={
                    "rolloutRestart": {
                        "configHash": config_hash,
                        "lastRestartTime": clocks.rfc3339(self._clock.now()),
                    }
                },
                updates=[true(api.ROLLOUT_RESTARTED, api.REASON_RESTARTED, message)],
            )
        delay = self._failed(uid, tuple((t["kind"], t["name"]) for t in targets), now)
        if missing:
            reason = api.REASON_TARGET_NOT_FOUND
        elif not_opted_in:
            reason = api.REASON_RESTART_NOT_PERMITTED
        else:
            reason = api.REASON_RESTART_FAILED
        problems = [f"{m} not found in namespace {namespace}" for m in missing]
        problems += not_opted_in + refused
        message = (
            f"configuration {short} is not rolled out to every target: {'; '.join(problems)}; "
            f"retried with backoff, at least every {RETRY_MAX_SECONDS:.0f} s"
        )
        if previous is None or (previous["status"], previous["reason"]) != ("False", reason):
            self._recorder.event(route, events.WARNING, reason, message)
        return Outcome(
            fields=kept,
            updates=[false(api.ROLLOUT_RESTARTED, reason, message)],
            requeue_after=delay,
        )

    # --- metrics -------------------------------------------------------------------------------

    def _rolled_out(self, kind: str, *, ok: bool) -> None:
        """One rollout patch sent, and whether the API server took it."""
        if self._metrics is not None:
            self._metrics.rolled_out(kind, ok=ok)

    def _pending(self, route: api.Route, pending: bool) -> None:
        if self._metrics is not None:
            self._metrics.rollout_pending(objects.namespace(route), objects.name(route), pending)

    def forget_route(self, namespace: str, name: str) -> None:
        """Route ``namespace/name`` is gone (or has no targets): its pending series goes."""
        if self._metrics is not None:
            self._metrics.forget_route(namespace, name)

    # --- timing --------------------------------------------------------------------------------

    def _timing_of(self, uid: str, now: float) -> _Timing:
        """The Route's timing, opening its window now if none is open."""
        with self._lock:
            timing = self._timing.get(uid)
            if timing is None:
                timing = self._timing[uid] = _Timing(opened=now)
                while len(self._timing) > self._max:
                    self._timing.popitem(last=False)
            return timing

    def _failed(self, uid: str, targets: tuple[tuple[str, str], ...], now: float) -> float:
        """Records a failed attempt; the seconds until the next one."""
        with self._lock:
            timing = self._timing.setdefault(uid, _Timing(opened=now))
            timing.failures += 1
            delay = retry_delay(timing.failures)
            timing.next_attempt = now + delay
            timing.targets = targets
            return delay

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._timing.pop(uid, None)

"""The API server's own floors for the scale benchmark (``python -m tests.bench.scale``): what a
bare client pays for the work the controller does, on the same server, in the same run. A
controller figure means little until it is set against what the API server allows.

* **The cold start's floor** (:func:`replay`): every request the controller's cold start made
  that is not a list, a watch or a Lease (its writes, and the Secret GETs of its sources), read
  from the audit log and made again by a bare :data:`~tests.support.scale.THREADS`-thread client,
  in the order the controller made them, each with a body like the controller's:

  - an apply of a Secret rotator writes → an apply, by the same field manager, of a copy named
    ``floor-<name>`` with the same labels, annotations, owner references and data: a create by
    server-side apply, as the cold start's were;
  - an apply of a status → an apply of the status the controller wrote, every condition's
    ``lastTransitionTime`` moved (a real change of the same size: the cold start's wrote a status
    where there was none);
  - the create of an Event → the create of a copy;
  - a GET of a Secret → the same GET.

  The bodies are read before the clock starts (one list per kind and namespace).
* **The propagation floor** (:class:`Relay`): the path from a source Secret's update to the
  route config holding its key, with no controller: a bare client's watch on the source sees the
  update and applies a derived Secret holding the key, its watch on that sees it and applies a
  route config inlining the key, and the benchmark's watch on route configs (the one that times
  the controller) sees it. Two writes and three watch deliveries, besides the update itself —
  what the controller's path costs less its GET of the source, its queues and its decisions.
  The benchmark times it twice: while the controller runs, its updates interleaved with the
  controller's (both timed over the same minutes), and alone after the controller has stopped.
* **The no-op restart's floor** (:func:`relist`): every page of every view the controller's
  cache lists (the same resources, selectors, page sizes and metadata-only Accept), read and
  decoded by a bare client, nothing kept: what any client pays to learn the state the restart
  re-decides. Its CPU is this process's, on the same machine in the same run, so the restart's
  CPU per object can be read against it on any day (the absolute "0.1 ms per object" moved 1.9x
  between two days with the same code).
"""

from __future__ import annotations

import base64
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from controllers.reconcilers import api as rapi
from controllers.runtime import apply, objects
from controllers.runtime import client as clients
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body, Resource
from tests.support import audit, scale
from tests.support.recording import WatchedStates, nearest_rank

RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (objects.SECRETS, objects.EVENTS, rapi.POLICIES, rapi.BACKENDS, rapi.ROUTES)
}
FLOOR_PREFIX = "floor-"
MOVED_TIME = "2000-01-01T00:00:00Z"
"""The ``lastTransitionTime`` the replayed statuses carry: the same length as any other."""


def replayed(request: audit.Request) -> bool:
    """Whether the floor makes ``request`` again: a write (Leases aside) or a Secret GET."""
    if request.stage != "ResponseComplete" or request.resource == "leases":
        return False
    if request.verb == "get":
        return request.resource == "secrets"
    return request.verb in ("create", "patch") and request.resource in RESOURCES


def _pages(api: clients.Client, resource: Resource, **query: Any) -> Iterator[Body]:
    """Every page of a list of ``resource`` (``query``: :meth:`clients.Client.list`'s
    arguments but the continue token), following the continue tokens."""
    token: str | None = None
    while True:
        page = api.list(resource, continue_token=token, **query)
        token = (page.get("metadata") or {}).get("continue")
        yield page
        if not token:
            return


def _items(api: clients.Client, resource: Resource, namespace: str) -> Iterable[Body]:
    for page in _pages(api, resource, namespace=namespace, limit=500):
        yield from page.get("items") or []


def _secret_copy(secret: Body) -> Body:
    md = objects.meta(secret)
    kept = {k: md[k] for k in ("labels", "annotations", "ownerReferences") if k in md}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": FLOOR_PREFIX + md["name"], "namespace": md["namespace"], **kept},
        "data": dict(secret.get("data") or {}),
    }


def _status_moved(obj: Body) -> Body:
    status = dict(obj.get("status") or {})
    status["conditions"] = [
        {**c, "lastTransitionTime": MOVED_TIME} for c in status.get("conditions") or []
    ]
    md = objects.meta(obj)
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": md["name"], "namespace": md["namespace"]},
        "status": status,
    }


def _event_copy(event: Body) -> Body:
    md = objects.meta(event)
    copy = {k: v for k, v in event.items() if k != "metadata"}
    copy["metadata"] = {"generateName": FLOOR_PREFIX, "namespace": md["namespace"]}
    return copy


@dataclass
class Replay:
    """The requests of :func:`replay`, made ready: one call each."""

    calls: list[Callable[[], object]] = field(default_factory=list)
    skipped: int = 0
    """Requests of the mix the floor could not make again (their object is gone, or a write it
    has no body for)."""

    def run(self, threads: int) -> scale.Timing:
        return scale.in_parallel(lambda i: self.calls[i](), len(self.calls), threads)


def replay(api: clients.Client, requests: Sequence[audit.Request]) -> Replay:
    """The calls that make ``requests`` (those :func:`replayed` keeps) again, bodies read now."""
    mix = [r for r in requests if replayed(r)]
    current: dict[tuple[str, str, str], Body] = {}
    for plural, namespace in {(r.resource, r.namespace) for r in mix}:
        for item in _items(api, RESOURCES[plural], namespace):
            current[(plural, namespace, objects.name(item))] = item
    out = Replay()
    for r in mix:
        obj = current.get((r.resource, r.namespace, r.name))
        if obj is None:
            out.skipped += 1
            continue
        resource = RESOURCES[r.resource]
        applied = functools.partial(apply.apply, api, resource, field_manager=rapi.FIELD_MANAGER)
        if r.verb == "get":
            out.calls.append(functools.partial(api.get, resource, r.name, namespace=r.namespace))
        elif r.resource == "events":
            event = _event_copy(obj)
            out.calls.append(functools.partial(api.create, resource, event, namespace=r.namespace))
        elif r.subresource == "status":
            out.calls.append(functools.partial(applied, _status_moved(obj), subresource="status"))
        elif r.resource == "secrets":
            out.calls.append(functools.partial(applied, _secret_copy(obj)))
        else:
            out.skipped += 1
    return out


# --- the propagation floor ---------------------------------------------------------------------

RELAY_LABEL = "bench.rotator.dev/floor"


@dataclass(frozen=True)
class Relisted:
    """What :func:`relist` read, and what it cost this process."""

    objects: int
    pages: int
    seconds: float
    cpu: float
    """This process's CPU seconds (user + system) over the relist: the floor, when nothing else
    runs in it."""


def relist(api: clients.Client, views: Iterable[Informer]) -> Relisted:
    """The no-op restart's floor: every page of each of ``views`` (informers made, never
    started: their resource, selector, page size, page bytes and view), in turn, decoded as the
    client decodes every list, and dropped."""
    count = pages = 0
    started, cpu = time.monotonic(), time.process_time()
    for view in views:
        for page in _pages(
            api,
            view.resource,
            label_selector=view.label_selector,
            limit=view.page_size,
            metadata_only=view.metadata_only,
            max_bytes=view.page_bytes,
        ):
            pages += 1
            count += len(page.get("items") or [])
    return Relisted(count, pages, time.monotonic() - started, time.process_time() - cpu)


def with_key(config_data: str, key: str) -> str:
    """A route config's ``config.yaml`` (base64) with its ``apiKey`` line holding ``key``."""
    lines = base64.b64decode(config_data).decode().splitlines()
    for n, line in enumerate(lines):
        head, sep, _ = line.partition("apiKey: ")
        if sep and not head.strip():
            lines[n] = f"{head}apiKey: {key}"
    return base64.b64encode(("\n".join(lines) + "\n").encode()).decode()


@dataclass
class Hop:
    """When (wall clock) the relay saw the source update, had written the derived Secret, saw
    that, and had written the route config."""

    source_seen: float = 0.0
    derived_written: float = 0.0
    derived_seen: float = 0.0
    config_written: float = 0.0


class Relay(WatchedStates):
    """The bare client of the propagation floor: three Secrets of its own in ``namespace``
    (a source, a derived Secret, a route config shaped like chain 0's and labelled with the
    route label, so the benchmark's watch times it) and one watch on them, started by ``with``
    (which creates the source first).

    Its Secrets carry neither ``managed-by`` nor a policy's label, so a controller running beside
    it reconciles nothing for them and does not cache their data. It still receives each of
    their writes in its metadata view of every Secret (as it does any Secret's), where no policy
    names them as a source: decoding those events is all they cost it. That is what lets the
    floor be timed in the controller's own run, interleaved with its updates (``prefix`` keeps
    two relays in one namespace apart)."""

    def __init__(
        self,
        api: clients.Client,
        namespace: str,
        derived: Body,
        config: Body,
        route_name: str,
        *,
        prefix: str = FLOOR_PREFIX,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self.source = f"{prefix}source"
        self.derived = f"{prefix}{objects.name(derived)}"
        route = f"{prefix}{route_name}"
        self.config = rapi.route_config_secret_name(route)
        self._derived_body = self._shaped(derived, self.derived, {})
        route_labels, _ = rapi.owner_labels(rapi.ROUTE_LABEL, route)
        self._config_body = self._shaped(config, self.config, route_labels)
        self.hops: dict[str, Hop] = {}
        self._lock = threading.Lock()
        super().__init__(api, objects.SECRETS, namespace, label_selector=RELAY_LABEL)

    def _shaped(self, template: Body, name: str, labels: dict[str, str]) -> Body:
        body = _secret_copy(template)
        md = body["metadata"]
        md["name"] = name
        md["labels"] = {**labels, RELAY_LABEL: "yes"}
        md.pop("ownerReferences", None)  # its owner is another chain's
        return body

    @property
    def where(self) -> str:
        """``namespace/name`` of the relay's route config, as the benchmark's watch names it."""
        return f"{self._namespace}/{self.config}"

    def __enter__(self) -> Self:
        body = {
            "metadata": {"name": self.source, "labels": {RELAY_LABEL: "yes"}},
            "data": {"apiKey": base64.b64encode(b"floor-initial").decode()},
        }
        self._api.create(objects.SECRETS, body, namespace=self._namespace)
        return super().__enter__()

    def send(self, key: str) -> None:
        """Updates the source to ``key`` (a JSON merge patch, as the benchmark updates a chain's)."""
        with self._lock:
            self.hops[key] = Hop()
        data = {"apiKey": base64.b64encode(key.encode()).decode()}
        self._api.patch(objects.SECRETS, self.source, {"data": data}, namespace=self._namespace)

    def record(self, obj: Body) -> None:
        name = objects.name(obj)
        if name not in (self.source, self.derived):
            return
        encoded = (obj.get("data") or {}).get("apiKey", "")
        key = base64.b64decode(encoded).decode(errors="replace")
        with self._lock:
            hop = self.hops.get(key)
        if hop is None:
            return
        if name == self.source and not hop.source_seen:
            hop.source_seen = time.time()
            body = {**self._derived_body, "data": {**self._derived_body["data"], "apiKey": encoded}}
            apply.apply(self._api, objects.SECRETS, body, field_manager=rapi.FIELD_MANAGER)
            hop.derived_written = time.time()
        elif name == self.derived and not hop.derived_seen:
            hop.derived_seen = time.time()
            data = dict(self._config_body["data"])
            data[rapi.ROUTE_CONFIG_KEY] = with_key(data[rapi.ROUTE_CONFIG_KEY], key)
            body = {**self._config_body, "data": data}
            apply.apply(self._api, objects.SECRETS, body, field_manager=rapi.FIELD_MANAGER)
            hop.config_written = time.time()


# --- where a propagation's time goes -----------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One update of the propagation figure: chain ``chain`` given ``key``; sent and seen by
    the benchmark's watch at these wall-clock times."""

    chain: int
    key: str
    sent: float
    arrived: float

    @property
    def latency(self) -> float:
        return self.arrived - self.sent


CONTROLLER_STAGES = (
    "update written, delivered, queued, until the source GET",
    "source GET",
    "policy reconcile, until its write",
    "derived Secret write",
    "delivered, queued, route reconcile, until its write",
    "route config write",
    "delivered to the benchmark's watch",
)
FLOOR_STAGES = (
    "update written and delivered to the relay",
    "derived Secret write",
    "delivered to the relay",
    "route config write",
    "delivered to the benchmark's watch",
)
"""The relay's stages, timed where the relay is (the controller's are timed by the API server):
a write lasts until the relay has read its response, and a watch may deliver the object before
that, so the stage after a write can be below zero."""


def controller_stages(
    sample: Sample, fleet: scale.Fleet, requests: Sequence[audit.Request]
) -> tuple[float, ...] | None:
    """Seconds in each of :data:`CONTROLLER_STAGES` for ``sample``, from the audit log of the
    controller's requests (None when one of its three requests is not in it)."""
    namespace = fleet.chain_namespace(sample.chain)
    config = rapi.route_config_secret_name(fleet.route(sample.chain))
    derived = rapi.derived_secret_name(fleet.policy(sample.chain))

    def first(verb: str, name: str, after: float) -> audit.Request | None:
        return next(
            (
                r
                for r in requests
                if r.verb == verb
                and r.resource == "secrets"
                and r.namespace == namespace
                and r.name == name
                and r.stage == "ResponseComplete"
                and r.received >= after
            ),
            None,
        )

    get = first("get", fleet.source_secret(sample.chain), sample.sent)
    write = first("patch", derived, get.received) if get else None
    route = first("patch", config, write.received) if write else None
    if get is None or write is None or route is None:
        return None
    return gaps(
        sample.sent,
        get.received,
        get.completed,
        write.received,
        write.completed,
        route.received,
        route.completed,
        sample.arrived,
    )


def floor_stages(sample: Sample, hop: Hop) -> tuple[float, ...]:
    """Seconds in each of :data:`FLOOR_STAGES` for one sample of the relay."""
    return gaps(
        sample.sent,
        hop.source_seen,
        hop.derived_written,
        hop.derived_seen,
        hop.config_written,
        sample.arrived,
    )


def gaps(*marks: float) -> tuple[float, ...]:
    """The seconds between each time of a path and the next."""
    return tuple(later - earlier for earlier, later in itertools.pairwise(marks))


def at_percentile(samples: Sequence[Sample], p: float) -> Sample:
    """The sample whose latency is the nearest-rank ``p`` percentile (as ``percentile``)."""
    return nearest_rank(sorted(samples, key=lambda s: s.latency), p)

"""Declaring what wakes a controller, beside its reconciler (controller-runtime's ``builder``).

``controller_managed_by(mgr).for_(…).owns(…).watches(…).complete(reconciler)`` builds one
controller and its event sources:

* :meth:`Builder.for_` — the kind reconciled: its changes request the object itself
  (:class:`~.sources.Kind`). Once per controller; its kind, lower-cased, names the controller
  unless :meth:`Builder.named` says otherwise (controller-runtime's default).
* :meth:`Builder.owns` — objects the kind controls: their changes request the controlling owner,
  if it is of the ``for_`` kind (:class:`~.sources.Owned`; ``EnqueueRequestForOwner`` with
  ``IsController``).
* :meth:`Builder.watches` — anything else: a mapper computes the requests
  (:class:`~.sources.Mapped`; ``EnqueueRequestsFromMapFunc``).

Every source takes an optional :class:`Predicate` (``when``) that judges creations and updates;
a deletion always passes. A predicate says in words what it compares, and each source records
what it wakes, so the wiring can be read back (:class:`Wiring`) and compared with the design
document's event-path table (tests/unit/test_event_path_table.py) instead of drifting from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

from controllers.runtime import cache as caches
from controllers.runtime import client as clients
from controllers.runtime import events, reconcile, sources
from controllers.runtime import metrics as metric_families
from controllers.runtime.controller import Controller, ControllerOptions
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body


class ControllerHost(Protocol):
    """What builds and runs controllers: the :class:`~.manager.Manager`, or one shard of a
    sharded replica (:class:`~.shards.Shard`), whose cache holds only that shard's objects."""

    @property
    def api(self) -> clients.Client: ...

    @property
    def cache(self) -> caches.Cache: ...

    @property
    def metrics(self) -> metric_families.Metrics: ...

    @property
    def recorder(self) -> events.EventRecorder: ...

    def new_controller(
        self, name: str, reconciler: reconcile.Reconciler, options: ControllerOptions | None = None
    ) -> Controller: ...


class ShardHost(ControllerHost, Protocol):
    """One shard of a sharded replica (:class:`~.shards.Shard`): a :class:`ControllerHost` for
    the objects of some namespaces, which the replica may give up while it runs on."""

    def holds(self, namespace: str) -> bool: ...

    def on_close(self, callback: Callable[[], None]) -> None: ...


Mapper = Callable[[Mapping[str, Any]], Iterable[reconcile.Request]]
"""A changed object → the requests it wakes (old and new, on update)."""


@dataclass(frozen=True)
class Predicate:
    """Whether a change matters (``(old or None, new) → bool``), and what it compares.

    ``compares`` names what is compared, as noun phrases (``generation``, ```Ready` (status)``):
    ``says`` reads "generation or `Ready` (status) changed". ``exception`` instead describes
    a predicate that passes every change but one ("the echo of its own write")."""

    test: Callable[[Body | None, Body], bool]
    compares: tuple[str, ...] = ()
    exception: str = ""

    def __post_init__(self) -> None:
        if not self.compares and not self.exception:
            raise ValueError("a predicate says what it compares, or the one change it skips")

    def __call__(self, old: Body | None, new: Body) -> bool:
        return self.test(old, new)

    @property
    def says(self) -> str:
        """The change that passes, in words."""
        if self.exception:
            return f"any change but {self.exception}"
        *rest, last = self.compares
        return f"{', '.join(rest)} or {last} changed" if rest else f"{last} changed"


Verb = Literal["For", "Owns", "Watches"]


@dataclass(frozen=True)
class Watch:
    """One source of a controller, as declared: what it watches, when, and what it wakes."""

    verb: Verb
    informer: Informer
    when: Predicate | None
    wakes: str
    source: sources.Source

    @property
    def of(self) -> str:
        """The objects watched: their kind, and whether the informer holds metadata only."""
        kind = self.informer.resource.kind
        return f"{kind} (metadata only)" if self.informer.metadata_only else kind

    @property
    def says(self) -> str:
        """Which of their changes pass, in words."""
        return "any change" if self.when is None else self.when.says


@dataclass(frozen=True)
class Wiring:
    """A built controller and the sources that feed it, in the order they were declared."""

    name: str
    controller: Controller
    watches: tuple[Watch, ...]


class Builder:
    """Collects one controller's sources; :meth:`complete` builds it in the manager."""

    def __init__(self, mgr: ControllerHost) -> None:
        self._mgr = mgr
        self._name = ""
        self._for: Informer | None = None
        self._watches: list[Watch] = []
        self._options: ControllerOptions | None = None

    def named(self, name: str) -> Self:
        """The controller's name (logs, metrics). Defaults to the ``for_`` kind, lower-cased."""
        self._name = name
        return self

    def for_(self, informer: Informer, *, when: Predicate | None = None) -> Self:
        """The kind reconciled, from ``informer``; its changes request the object itself."""
        if self._for is not None:
            raise ValueError("for_ may be called once: a controller reconciles one kind")
        self._for = informer
        source = sources.Kind(informer, when)
        self._watches.insert(0, Watch("For", informer, when, "itself", source))
        return self

    def owns(self, informer: Informer, *, when: Predicate | None = None) -> Self:
        """Objects the ``for_`` kind controls: a change requests their controlling owner."""
        owner = self._primary().resource
        source = sources.Owned(informer, owner, when)
        wakes = f"its controller, if a {owner.kind}"
        self._watches.append(Watch("Owns", informer, when, wakes, source))
        return self

    def watches(
        self, informer: Informer, mapper: Mapper, *, wakes: str, when: Predicate | None = None
    ) -> Self:
        """Any other objects: a change requests what ``mapper`` returns, which ``wakes`` says."""
        source = sources.Mapped(informer, mapper, when)
        self._watches.append(Watch("Watches", informer, when, wakes, source))
        return self

    def with_options(self, options: ControllerOptions) -> Self:
        """The controller's options. Defaults to :class:`ControllerOptions`' defaults."""
        self._options = options
        return self

    def complete(self, reconciler: reconcile.Reconciler) -> Wiring:
        """Builds the controller in the manager with every declared source."""
        name = self._name or self._primary().resource.kind.lower()
        controller = self._mgr.new_controller(name, reconciler, self._options)
        for watch in self._watches:
            controller.watch(watch.source)
        return Wiring(name, controller, tuple(self._watches))

    def _primary(self) -> Informer:
        if self._for is None:
            raise ValueError("for_ comes first: it names the kind reconciled")
        return self._for


def controller_managed_by(mgr: ControllerHost) -> Builder:
    """A builder of one controller that ``mgr`` runs."""
    return Builder(mgr)

"""Informer handlers for tests and benchmarks that record what objects became."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self, TypeVar

from controllers.runtime import client as clients
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body, Resource

T = TypeVar("T")


class LatestStates:
    """Hands every state an object reaches (added or updated) to :meth:`record`; deletions are
    of no interest to the recorders built on it."""

    def on_add(self, obj: Body) -> None:
        self.record(obj)

    def on_update(self, old: Body, new: Body) -> None:
        self.record(new)

    def on_delete(self, obj: Body) -> None:
        pass

    def record(self, obj: Body) -> None:
        raise NotImplementedError


class WatchedStates(LatestStates):
    """A recorder with its own informer over one namespace: ``with`` starts it and waits for its
    first list, so nothing that happens inside the block is missed."""

    def __init__(
        self,
        api: clients.Client,
        resource: Resource,
        namespace: str,
        *,
        label_selector: str | None = None,
    ) -> None:
        self._informer = Informer(
            api, resource, namespaces=[namespace], label_selector=label_selector
        )
        self._informer.add_handler(self)

    def __enter__(self) -> Self:
        self._informer.start()
        if not self._informer.wait_for_sync(30):
            self._informer.stop()
            raise TimeoutError(f"the watch of {self._informer.resource} did not sync in 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._informer.stop()


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (p from 0 to 100) of a non-empty list."""
    return nearest_rank(sorted(values), p)


def nearest_rank(ordered: Sequence[T], p: float) -> T:
    """The item at the nearest-rank percentile ``p`` (0 to 100) of a non-empty sorted sequence."""
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

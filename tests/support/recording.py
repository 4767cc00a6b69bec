"""Informer handlers for tests and benchmarks that record what objects became."""

from __future__ import annotations

from controllers.runtime.objects import Body


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


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (p from 0 to 100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

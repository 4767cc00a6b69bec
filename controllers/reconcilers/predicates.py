"""The predicates the wiring filters events with, one per comparison, named for what it compares.

Each returns a :class:`~controllers.runtime.builder.Predicate`: ``(old or None, new) → whether
the change matters``, and the words for it that docs/design.md §4 shows. A creation (``old`` is
None) always passes; the sources let every deletion through. Compose them with :func:`any_of`:

    any_of(generation_changed(), condition_changed(api.READY, "status"))

A status-only update is usually the controller's own write: a predicate that passes it says
which part of the status it reads (:func:`condition_changed`), so that nothing else does.
"""

from __future__ import annotations

from collections.abc import Callable

from controllers.reconcilers import conditions
from controllers.reconcilers.cache import ownwrites
from controllers.runtime import objects
from controllers.runtime.builder import Predicate
from controllers.runtime.objects import Body


def _on_update(compare: Callable[[Body, Body], bool]) -> Callable[[Body | None, Body], bool]:
    """``compare`` on an update; a creation always passes."""
    return lambda old, new: old is None or compare(old, new)


def generation_changed() -> Predicate:
    """``metadata.generation`` (the spec) changed: skips status-only updates (controller-runtime's
    ``GenerationChangedPredicate``)."""

    def changed(old: Body, new: Body) -> bool:
        return objects.meta(old).get("generation") != objects.meta(new).get("generation")

    return Predicate(_on_update(changed), ("its generation",))


def annotations_changed(prefix: str) -> Predicate:
    """An annotation whose key starts with ``prefix`` was added, changed or removed (another
    tool's annotations are no reason to reconcile)."""

    def ours(obj: Body) -> dict[str, str]:
        annotations: dict[str, str] = objects.meta(obj).get("annotations") or {}
        return {k: v for k, v in annotations.items() if k.startswith(prefix)}

    return Predicate(
        _on_update(lambda old, new: ours(old) != ours(new)), (f"its `{prefix}` annotations",)
    )


def metadata_changed(*fields: str) -> Predicate:
    """Any of these ``metadata`` fields changed (``deletionTimestamp``, ``finalizers``)."""

    def changed(old: Body, new: Body) -> bool:
        before, after = objects.meta(old), objects.meta(new)
        return any(before.get(f) != after.get(f) for f in fields)

    return Predicate(_on_update(changed), tuple(f"`{f}`" for f in fields))


def condition_changed(type_: str, *fields: str) -> Predicate:
    """The condition ``type_`` appeared, went, or changed in any of ``fields`` (``status``,
    ``reason``, ``message``): the part of another object's status a reconcile reads."""
    if not fields:
        raise ValueError("name the fields of the condition that matter")

    def summary(obj: Body) -> tuple[object, ...] | None:
        condition = conditions.of(obj, type_)
        return None if condition is None else tuple(condition.get(f) for f in fields)

    return Predicate(
        _on_update(lambda old, new: summary(old) != summary(new)),
        (f"`{type_}` ({', '.join(fields)})",),
    )


def not_own_write(writes: ownwrites.OwnWrites) -> Predicate:
    """Every change but the echo of a write this process made (:mod:`.cache.ownwrites`);
    consumes the record of that write when its echo passes by."""
    return Predicate(writes.not_echo, exception="the echo of its own write")


def any_of(*predicates: Predicate) -> Predicate:
    """Passes when one of ``predicates`` does (controller-runtime's ``predicate.Or``)."""
    if any(p.exception for p in predicates):
        raise ValueError("only comparisons compose: a predicate with an exception stands alone")
    return Predicate(
        lambda old, new: any(p(old, new) for p in predicates),
        tuple(c for p in predicates for c in p.compares),
    )

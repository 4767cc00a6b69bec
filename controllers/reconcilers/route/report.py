"""The Route's own conditions from what its reconcile found: ``ResolvedRefs`` from the backends
left out (:mod:`.resolve`), ``Translated`` from a format's gaps (:mod:`.formats`), and the bound
on how much of a list a message holds. ``Programmed`` is the config Secret's
(:mod:`.configsecret`), ``RolloutRestarted`` the restarts' (:mod:`.restarts`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controllers.reconcilers import api, conditions
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.route.formats.base import Gap
from controllers.reconcilers.route.resolve import Unresolved

MESSAGE_BUDGET = 4096
"""Characters of a condition message spent on listing problems: the CRD allows 32768, and a Route
may reference 2048 backends."""


def bounded(items: list[str]) -> str:
    """``items`` joined, as many as fit in :data:`MESSAGE_BUDGET`, then how many more there are."""
    shown: list[str] = []
    used = 0
    for item in items:
        if shown and used + len(item) > MESSAGE_BUDGET:
            break
        shown.append(item[:MESSAGE_BUDGET])
        used += len(item) + 2
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def resolved_refs(problems: Mapping[str, Unresolved]) -> conditions.Cond:
    """``ResolvedRefs``: True, or False with the reason of the first backend left out (by
    name) and every one named."""
    if not problems:
        return true(
            api.RESOLVED_REFS,
            api.REASON_RESOLVED_REFS,
            "every backend and its credentials resolved",
        )
    names = sorted(problems)
    first = problems[names[0]]
    return false(
        api.RESOLVED_REFS,
        first.reason,
        f"left out of the configuration: {bounded([str(problems[n]) for n in names])}",
    )


def translated(gaps: Sequence[Gap], fmt: str = "LiteLLM") -> conditions.Cond:
    """``Translated`` of a Route in a format that reports gaps (``fmt``: LiteLLM, Envoy): what its
    configuration leaves out."""
    if not gaps:
        return true(api.TRANSLATED, api.REASON_TRANSLATED, f"{fmt} expresses the whole spec")
    return false(
        api.TRANSLATED,
        api.REASON_NOT_EXPRESSIBLE,
        f"left out of the {fmt} configuration: {bounded([str(g) for g in gaps])}",
    )

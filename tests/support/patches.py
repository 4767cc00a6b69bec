"""How the API server applies each patch type, for the in-memory API server
(``tests/support/memapi.py``); each function takes the stored object and returns a new one.

* :func:`merge` — RFC 7386.
* :func:`json_patch` — RFC 6902, by the ``jsonpatch`` package (a well-kept implementation, its
  pointer escaping included): all operations or none; a ``remove`` or ``test`` that does not
  apply is ``Invalid``, as the API server answers.
* :func:`strategic` — a merge patch that also merges ``metadata.finalizers`` (its patch strategy)
  and honours ``$deleteFromPrimitiveList/finalizers``: the strategic patches rotator sends, not
  the general algorithm (which needs each type's schema).
* :func:`apply` — server-side apply by one field manager: what it applied before and no longer
  sends is removed, what it sends merged in (maps merged, lists replaced whole). Ownership
  between managers is not modelled: rotator applies with ``force``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import jsonpointer

from controllers.runtime import errors, objects
from controllers.runtime.objects import Body


def json_patch(base: Body, patch: Mapping[str, Any] | Sequence[Any]) -> Body:
    try:
        if isinstance(patch, Mapping) or not all(isinstance(op, Mapping) for op in patch):
            raise jsonpatch.InvalidJsonPatch("a JSON Patch is a list of operations")
        return dict(jsonpatch.apply_patch(base, [dict(op) for op in patch]))
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        raise errors.Invalid(
            "the server rejected our request due to an error in our request",
            status=422,
            reason="Invalid",
        ) from None


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386, as its section 2 writes it (ten lines: no library of it is worth a dependency)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge(result.get(k), v)
    return result


def strategic(base: Body, patch: dict[str, Any]) -> Any:
    """A merge patch, but ``metadata.finalizers`` merged (its patch strategy) and
    ``$deleteFromPrimitiveList/finalizers`` honoured: the strategic patches rotator sends."""
    md = dict(patch.get("metadata") or {})
    have = list(objects.meta(base).get("finalizers") or [])
    drop = md.pop("$deleteFromPrimitiveList/finalizers", None)
    add = md.pop("finalizers", None)
    if drop is not None or add is not None:
        merged = [f for f in have if f not in (drop or [])]
        merged += [f for f in add or [] if f not in merged]
        md["finalizers"] = merged or None
    return merge(base, {**patch, "metadata": md} if "metadata" in patch or md else patch)


def apply(base: Any, applied: Any, before: Any) -> Any:
    """Server-side apply by one manager: what it applied ``before`` and no longer sends is
    removed, what it sends is merged in (maps merged, everything else replaced)."""
    if not (isinstance(applied, Mapping) and isinstance(base, Mapping)):
        return copy.deepcopy(applied)
    result = dict(base)
    if isinstance(before, Mapping):
        for k in before:
            if k not in applied:
                result.pop(k, None)
    for k, v in applied.items():
        prior = before.get(k) if isinstance(before, Mapping) else None
        result[k] = apply(result.get(k), v, prior)
    return result

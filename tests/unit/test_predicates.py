"""The predicate factory: each predicate passes exactly the changes it names, creations always,
and says so in the words docs/design.md §4 shows."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.reconcilers import predicates
from controllers.reconcilers.cache import ownwrites
from controllers.runtime.builder import Predicate


def obj(
    generation: int = 1,
    *,
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "p", "namespace": "ns", "generation": generation, **metadata}
    if annotations is not None:
        md["annotations"] = annotations
    body: dict[str, Any] = {"metadata": md}
    if conditions is not None:
        body["status"] = {"conditions": conditions}
    return body


def ready(status: str = "True", reason: str = "R", message: str = "m") -> dict[str, str]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message}


def test_generation_changed_skips_status_only_updates() -> None:
    changed = predicates.generation_changed()
    assert changed(obj(1), obj(2))
    assert not changed(obj(1), obj(1, conditions=[ready()]))
    assert changed(None, obj(1)), "a creation passes"
    assert changed.says == "its generation changed"


def test_annotations_changed_reads_only_its_prefix() -> None:
    changed = predicates.annotations_changed("rotator.dev/")
    assert changed(obj(), obj(annotations={"rotator.dev/rotate-requested-at": "now"}))
    assert changed(obj(annotations={"rotator.dev/a": "1"}), obj(annotations={}))
    assert not changed(obj(), obj(annotations={"meta.helm.sh/release-name": "gw"}))
    assert changed.says == "its `rotator.dev/` annotations changed"


def test_metadata_changed_compares_the_fields_it_names() -> None:
    changed = predicates.metadata_changed("deletionTimestamp", "finalizers")
    assert changed(obj(), obj(deletionTimestamp="t"))
    assert changed(obj(finalizers=["f"]), obj())
    assert not changed(obj(), obj(labels={"a": "b"}))
    assert changed.says == "`deletionTimestamp` or `finalizers` changed"


@pytest.mark.parametrize(
    ("fields", "after", "passes"),
    [
        (("status",), ready(status="False"), True),
        (("status",), ready(message="other"), False),
        (("status", "message"), ready(message="other"), True),
        (("status", "message"), ready(reason="Other"), False),
        (("status", "reason"), ready(reason="Other"), True),
        (("status", "reason"), ready(message="other"), False),
    ],
)
def test_condition_changed_compares_only_the_fields_named(
    fields: tuple[str, ...], after: dict[str, str], passes: bool
) -> None:
    changed = predicates.condition_changed("Ready", *fields)
    assert changed(obj(conditions=[ready()]), obj(conditions=[after])) is passes


def test_a_condition_appearing_or_going_is_a_change_and_others_are_not() -> None:
    changed = predicates.condition_changed("Ready", "status")
    other = {"type": "RenewBeforeHonored", "status": "False", "reason": "X", "message": "y"}
    assert changed(obj(), obj(conditions=[ready()]))
    assert changed(obj(conditions=[ready()]), obj(conditions=[]))
    assert not changed(obj(conditions=[ready()]), obj(conditions=[ready(), other]))
    assert predicates.condition_changed("Ready", "status", "message").says == (
        "`Ready` (status, message) changed"
    )
    with pytest.raises(ValueError, match="fields"):
        predicates.condition_changed("Ready")


def test_any_of_passes_when_one_does_and_lists_what_each_compares() -> None:
    changed = predicates.any_of(
        predicates.generation_changed(), predicates.condition_changed("Ready", "status")
    )
    assert changed(obj(1), obj(2))
    assert changed(obj(conditions=[ready()]), obj(conditions=[ready("False")]))
    assert not changed(obj(conditions=[ready()]), obj(conditions=[ready(message="n")]))
    assert changed.says == "its generation or `Ready` (status) changed"


def test_not_own_write_skips_the_echo_once_and_nothing_else() -> None:
    writes = ownwrites.OwnWrites()
    written = {"metadata": {"name": "s", "namespace": "ns"}, "data": {"k": "dg=="}}
    writes.expect(written)
    not_echo = predicates.not_own_write(writes)
    assert not not_echo(None, written), "the echo of the write is skipped"
    assert not_echo(None, written), "once: the same content again is someone's change"
    assert not_echo.says == "any change but the echo of its own write"
    with pytest.raises(ValueError, match="compose"):
        predicates.any_of(predicates.generation_changed(), not_echo)


def test_a_predicate_that_says_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="says"):
        Predicate(lambda old, new: True)

"""Rules the chain once wrote in several places, each now written once (issue 35), and the one
answer each gives, pinned: what a missing ``Ready`` means, how the expiry annotation reads,
``targetRefs`` and ``backendRefs`` as names and keys, fitting a long name as ``sha256-<hex>``,
the capped doubling of a retry, when a copied credential is current, and where a reason's
value is written."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from controllers.reconcilers import api, derived
from controllers.reconcilers.backend import wiring as backend_wiring
from controllers.reconcilers.cache import chaincache, indexes
from controllers.reconcilers.policy import decide
from controllers.reconcilers.route import resolve, restarts
from controllers.reconcilers.route.resolve import Chain, Standing, Unresolved
from controllers.runtime import objects
from controllers.runtime.reconcile import Request
from controllers.runtime.store import Store
from rotator import errors, schedule
from rotator.credentials import Credential
from rotator.providers.aws import identity, sts
from tests.support import gen
from tests.unit.test_policy_decide import KEY, NOW, Copying, inputs, policy
from tests.unit.test_route_reconciler import NS, World

BACKEND = {"metadata": {"name": "b", "namespace": NS}, "spec": {"schema": "OpenAI"}}


def bsp(name: str, conditions: list[dict[str, str]] | None) -> dict[str, Any]:
    """Policy ``name`` targeting backend ``b``: ``conditions``, or no status at all (None)."""
    status = [] if conditions is None else [gen.conditions(*conditions)]
    return gen.policy(name, gen.targets("b"), *status, namespace=NS)


def policies(*bodies: dict[str, Any]) -> Store:
    store = Store()
    chaincache.index(policies=store)
    for body in bodies:
        store.upsert(body)
    return store


# --- one policy per backend, and a missing Ready ---------------------------------------------


@pytest.mark.parametrize(
    ("bodies", "standing"),
    [
        ((), Standing.NO_POLICY),
        ((bsp("p", [{"type": "Ready", "status": "True"}]),), Standing.READY),
        ((bsp("p", [{"type": "Ready", "status": "False", "message": "m"}]),), Standing.NOT_READY),
        ((bsp("p", [{"type": "Ready"}]),), Standing.NOT_READY),
        ((bsp("p", None),), Standing.PENDING),
        ((bsp("p", [{"type": "Accepted", "status": "True"}]),), Standing.PENDING),
        ((bsp("p", None), bsp("q", None)), Standing.CONFLICT),
    ],
    ids=[
        "none",
        "ready",
        "not-ready",
        "ready-without-status",
        "no-status",
        "no-ready-condition",
        "two",
    ],
)
def test_the_one_policy_rule_and_the_ready_rule(
    bodies: tuple[dict[str, Any], ...], standing: Standing
) -> None:
    assert resolve.attachment(policies(*bodies), f"{NS}/b").standing is standing


def test_a_missing_ready_condition_means_pending_and_not_ready_to_every_reader() -> None:
    """The chosen answer (docs/design.md §1): a policy without ``Ready`` is not reconciled yet.
    The backend writes no status (waits for the verdict); a Route's backend is still arriving
    (a new Route waits) and, once the Route no longer waits, left out as ``PolicyNotReady``."""
    attached = resolve.attachment(policies(bsp("p", None)), f"{NS}/b")
    chain = Chain("b", BACKEND, attached, None)
    assert chain.arriving()
    with pytest.raises(Unresolved) as caught:
        chain.resolve(NOW)
    assert caught.value.reason == api.REASON_POLICY_NOT_READY

    world = World()
    world.api.put(api.BACKENDS, dict(BACKEND))
    world.api.put(api.POLICIES, bsp("p", None))
    world.route("b")
    world.reconcile()
    assert world.condition("ResolvedRefs")["reason"] == api.REASON_POLICY_NOT_READY


# --- the expiry annotation ----------------------------------------------------------------------


def _raises(exc: type[Exception]) -> Any:
    def parse(value: str) -> float:
        raise exc(value)

    return parse


@pytest.mark.parametrize(
    ("value", "parse"),
    [
        ("next tuesday", None),
        ("", None),
        ("2026-13-01T00:00:00Z", None),
        ("0001-01-01T00:00:00", None),
        ("9" * 400, _raises(OverflowError)),
        ("nan", float),
        ("inf", float),
        ("-inf", float),
    ],
)
def test_an_unreadable_time_reads_as_none(value: str, parse: Any) -> None:
    """ValueError, OverflowError and non-finite values alike (derived.py caught all three, the
    Route only ValueError)."""
    assert (derived.read_time(value) if parse is None else derived.read_time(value, parse)) is None


@pytest.mark.parametrize("value", ["next tuesday", "", "2026-13-01T00:00:00Z"])
def test_the_policy_and_the_route_read_an_expiry_alike(value: str) -> None:
    """One reader: what the policy side takes for long past, the Route leaves out as
    ``InvalidCredentials``."""
    p = cast(api.Policy, {**bsp("p", None), "metadata": {"name": "p", "namespace": NS, "uid": "u"}})
    secret = derived.build(p, Credential({"apiKey": b"k"}), minted=False)
    secret["metadata"]["annotations"][api.EXPIRATION_ANNOTATION] = value
    served = derived.read(secret)
    assert served is not None
    assert served.credential.expires_at == derived.UNREADABLE_EXPIRY
    assert api.EXPIRATION_ANNOTATION in served.malformed
    ready = resolve.Attachment(Standing.READY, (p,), None)
    with pytest.raises(Unresolved) as caught:
        Chain("b", BACKEND, ready, secret).resolve(NOW)
    assert caught.value.reason == api.REASON_INVALID_CREDENTIALS
    assert math.isfinite(derived.read_time("2026-01-01T00:00:00Z") or math.nan)


# --- targetRefs and backendRefs -----------------------------------------------------------------


def test_target_refs_are_read_once_as_names_then_keys_or_requests() -> None:
    p = {
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"targetRefs": [{"name": "b"}, {"name": "a"}, {"name": "b"}]},
    }
    assert indexes.target_names(p) == ["b", "a"]
    assert set(indexes.policy_backends(p)) == {f"{NS}/a", f"{NS}/b"}
    assert backend_wiring.targets(p) == [Request(NS, "b"), Request(NS, "a")]
    assert indexes.target_names({"metadata": {"name": "p", "namespace": NS}}) == []


def test_backend_refs_are_read_once_as_names_then_keys() -> None:
    route = {
        "metadata": {"name": "r", "namespace": NS},
        "spec": {
            "rules": [
                {"backendRefs": [{"name": "b"}, {"name": "a"}]},
                {"backendRefs": [{"name": "a"}, {"name": "c"}]},
            ]
        },
    }
    assert indexes.route_backend_names(route) == ["b", "a", "c"]
    assert set(indexes.route_backends(route)) == {objects.make_key(NS, n) for n in "abc"}


# --- sha256-<hex> -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fits"),
    [
        ("chat", True),
        ("a.b-c_d", True),
        ("r" * 63, True),
        ("r" * 64, False),
        ("-r", False),
        ("r-", False),
        ("", False),
        ("a/b", False),
        ("abc\n", False),  # a final newline: "$" matched before it
    ],
)
def test_a_name_is_fitted_the_same_way_for_a_label_and_an_annotation(name: str, fits: bool) -> None:
    fitted = api.fit_name(name)
    assert (fitted == name) is fits
    if not fits:
        assert fitted.startswith("sha256-")
        assert len(fitted) == len("sha256-") + 40
    labels, annotations = api.owner_labels(api.ROUTE_LABEL, name)
    assert labels == {api.ROUTE_LABEL: fitted}
    assert annotations == ({} if fits else {api.OWNER_NAME_ANNOTATION: name})
    assert restarts.template_annotation(name) == api.ROLLOUT_ANNOTATION_PREFIX + fitted


# --- capped doubling ----------------------------------------------------------------------------


def test_the_rollout_retry_is_the_schedules_capped_doubling() -> None:
    expected = [min(300.0, 2.0 ** (n - 1)) for n in range(1, 20)]
    assert [restarts.retry_delay(n) for n in range(1, 20)] == expected
    assert [schedule.doubling(1.0, 300.0, n) for n in range(1, 20)] == expected
    assert schedule.doubling(1.0, 300.0, 0) == 1.0, "fewer than one failure counts as one"
    assert schedule.doubling(1.0, 300.0, 10**6) == 300.0


# --- a copied credential ------------------------------------------------------------------------


def test_a_copy_is_current_only_where_no_refresh_check_objects() -> None:
    """``copy_is_current`` asks :func:`decide.edited` and :func:`decide.spec_changed` instead of
    checking intact, malformed and the spec hash a second way."""
    p = policy(KEY)
    secret = derived.build(p, Credential({"apiKey": b"k"}), minted=False, copied_from="7")
    copy = derived.read(secret)
    assert copy is not None

    def current(served: derived.Served, spec: dict[str, Any] = KEY) -> bool:
        i = inputs(policy(spec), served, Copying(), cached_version=lambda _: "7")
        objections = [check(i) for check in (decide.edited, decide.spec_changed)]
        assert decide.copy_is_current(i) is all(o is None for o in objections)
        return decide.copy_is_current(i)

    assert current(copy)
    edited = derived.Served(copy.credential, False, copy.spec_hash, None, (), "7")
    assert not current(edited)
    malformed = derived.Served(copy.credential, True, copy.spec_hash, None, ("x",), "7")
    assert not current(malformed)
    other_key = {**KEY, "apiKey": {"secretRef": {"name": "other", "key": "apiKey"}}}
    assert not current(copy, other_key)


# --- reasons ------------------------------------------------------------------------------------


def test_a_reason_value_is_written_once() -> None:
    """``RotationFailed`` is :class:`rotator.errors.CredentialError`'s, ``AssumeRoleFailed`` the
    STS provider's, each re-exported as it is; ``ControllerIdentityNotFound`` lives on the
    identity provider's error only (the API module's copy was unused)."""
    assert api.REASON_ROTATION_FAILED == errors.CredentialError.reason == "RotationFailed"
    assert api.REASON_ASSUME_ROLE_FAILED == sts.ASSUME_ROLE_FAILED == "AssumeRoleFailed"
    constants = {k: v for k, v in vars(api).items() if k.startswith("REASON_")}
    assert identity.NoIdentity.reason == "ControllerIdentityNotFound"
    assert identity.NoIdentity.reason not in constants.values()

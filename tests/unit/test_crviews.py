"""The BackendSecurityPolicy, ServiceBackend and Route cache views keep what the reconcilers, the
event predicates and the indexes read, and nothing a user or another tool adds around it."""

from __future__ import annotations

import copy
from typing import Any

from controllers.reconcilers import api, predicates
from controllers.reconcilers.cache import crviews
from controllers.runtime.informer import strip_never_read

STATUS = {
    "derivedSecretName": "rotator-bsp-p",
    "expirationTime": "2023-11-14T23:13:20Z",
    "conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "m"}],
}


def listed(kind: str, **metadata: Any) -> dict[str, Any]:
    """An object as the API server lists it, applied by a GitOps tool."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": kind,
        "metadata": {
            "name": "x",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "generation": 2,
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {
                "meta.helm.sh/release-name": "gw",
                api.ROTATE_REQUESTED_ANNOTATION: "now",
            },
            "ownerReferences": [{"kind": "Application", "name": "gw"}],
            "managedFields": [{"manager": "helm"}],
            **metadata,
        },
        "spec": {"type": "APIKey", "targetRefs": [{"name": "b"}]},
        "status": copy.deepcopy(STATUS),
    }


def test_a_policy_keeps_identity_finalizers_its_own_annotations_spec_and_status() -> None:
    obj = listed("BackendSecurityPolicy", finalizers=["f"], deletionTimestamp="t")
    kept = crviews.policy(strip_never_read(copy.deepcopy(obj)))
    assert kept["metadata"] == {
        "name": "x",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "7",
        "generation": 2,
        "deletionTimestamp": "t",
        "finalizers": ["f"],
        "annotations": {api.ROTATE_REQUESTED_ANNOTATION: "now"},
    }
    assert kept["spec"] == obj["spec"]
    assert kept["status"] == STATUS, "whole: the status write compares against it"
    assert (kept["apiVersion"], kept["kind"]) == (api.API_VERSION, "BackendSecurityPolicy")


def test_another_tools_annotation_no_longer_wakes_a_policy() -> None:
    """Neither the view (above) nor the policy's predicate keeps another tool's annotation.
    Mutation caught: the predicate comparing every annotation."""
    changed = predicates.annotations_changed(crviews.ROTATOR_ANNOTATION_PREFIX)
    before = listed("BackendSecurityPolicy")
    edited = listed("BackendSecurityPolicy")
    edited["metadata"]["annotations"]["meta.helm.sh/release-name"] = "gw-2"
    assert not changed(before, edited)
    assert not changed(crviews.policy(before), crviews.policy(edited))
    requested = listed("BackendSecurityPolicy")
    requested["metadata"]["annotations"][api.ROTATE_REQUESTED_ANNOTATION] = "again"
    assert changed(crviews.policy(before), crviews.policy(requested))


def test_backends_and_routes_keep_their_creation_time_and_no_labels_or_annotations() -> None:
    for view, kind in ((crviews.backend, "ServiceBackend"), (crviews.route, "Route")):
        kept = view(listed(kind))
        assert kept["metadata"] == {
            "name": "x",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "generation": 2,
            "creationTimestamp": "2023-11-14T22:13:20Z",
        }
        assert kept["status"] == STATUS
        assert kept["spec"] == listed(kind)["spec"]


def test_an_object_without_status_is_kept_without_one() -> None:
    obj = listed("Route")
    del obj["status"]
    assert "status" not in crviews.route(obj)

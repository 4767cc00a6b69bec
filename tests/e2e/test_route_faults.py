"""Failure safety: one bad input never wedges the rest. A backend whose credentials are not text is
left out of its Route while the others keep rotating; a configuration over the Secret limit is
refused and the previous one kept; the expiry metric is there after a restart whose first refresh
fails; a hand-edited state annotation is reported and repaired, without a crash loop."""

from __future__ import annotations

import base64
import functools
import json
import time
from typing import Any

import boto3

from controllers.reconcilers import api as rapi
from controllers.reconcilers import routeconfig
from controllers.runtime import objects
from rotator.credentials import content_hash
from rotator.providers.aws import iam as iam_keys
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.test_aws import CLIENT_SECRET, oidc_source
from tests.support import reconcilelog
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for

NOT_TEXT = b"\xff\xfe[default]\naws_access_key_id = AKIANOTTEXT0001\n"
ADMIN_KEY = "AKIAADMIN0000000"
ADMIN = (
    f"[default]\naws_access_key_id = {ADMIN_KEY}\naws_secret_access_key = admin-secret-value-123\n"
)
RETIRE = rapi.STATE_ANNOTATION_PREFIX + iam_keys.RETIRE_AT
PREVIOUS = rapi.STATE_ANNOTATION_PREFIX + iam_keys.PREVIOUS_KEY


def iam_client(moto: str) -> Any:
    return boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=moto,
        aws_access_key_id=ADMIN_KEY,
        aws_secret_access_key="x",
    )


def iam_policy(chain: AWSChain, moto: str, name: str, targets: list[str]) -> str:
    """An IAM-access-key policy (against moto) for a user of its own; returns the user name."""
    user = f"gw-{name}-{chain.ns}"
    iam_client(moto).create_user(UserName=user)
    chain.secret("iam-admin", credentials=ADMIN)
    chain.aws_policy(
        name, targets, {"iamAccessKey": {"userName": user, "secretRef": {"name": "iam-admin"}}}
    )
    return user


def user_keys(moto: str, user: str) -> set[str]:
    listed = iam_client(moto).list_access_keys(UserName=user)["AccessKeyMetadata"]
    return {k["AccessKeyId"] for k in listed}


def failures(controller: ControllerProcess, name: str, namespace: str) -> list[str]:
    """Why reconciles of ``name`` in ``namespace`` failed, except write conflicts (a stale cache:
    retried at once by design)."""
    return [
        str(entry.get("error_type"))
        for _, entry in reconcilelog.entries(controller.logs())
        if entry.get("event") == "reconcile.failed"
        and (entry.get("controller"), entry.get("namespace")) == (name, namespace)
        and entry.get("error_type") != "Conflict"
    ]


def reconciles_of(controller: ControllerProcess, obj: str, *, since: float) -> int:
    """How many reconciles of ``obj`` (``controller:namespace/name``) started after ``since``,
    from the controller's debug log: the session controller also reconciles earlier tests'
    objects (a refresh due, a resync), which a controller-wide metric would count too."""
    return sum(
        1
        for r in reconcilelog.reconciles(controller.logs(), ended_at=time.time())
        if r.object == obj and r.start >= since
    )


def api_key(chain: AWSChain, route: str, backend: str) -> str | None:
    creds = chain.backend_credentials(route).get(backend) or {}
    value = (creds.get("data") or {}).get("apiKey")
    return None if value is None else str(value)


def serves(chain: AWSChain, backend: str, value: str) -> bool:
    return api_key(chain, "r", backend) == value


def derived_annotations(chain: AWSChain, policy: str) -> dict[str, str]:
    secret = chain.get("secret", rapi.derived_secret_name(policy)) or {}
    return dict(secret.get("metadata", {}).get("annotations") or {})


def test_a_backend_whose_credentials_are_not_text_does_not_hold_back_the_others(
    chain: AWSChain, moto: str, controller: ControllerProcess
) -> None:
    iam_policy(chain, moto, "iam", ["broken"])
    chain.backend("broken", schema="AWSBedrock", host="bedrock-runtime.us-east-1.amazonaws.com")
    chain.secret("key", apiKey="sk-good-first-0001")
    chain.api_key_policy("good", secret="key", targets=["good"])
    chain.backend("good")
    chain.route("r", ["broken", "good"])
    wait_for(
        lambda: set(chain.backend_credentials("r")) == {"broken", "good"},
        timeout=60,
        what="both backends in the config",
    )
    # The served IAM key made undecodable, its hash kept consistent: the policy sees an intact
    # credential it has no reason to replace for 24 h, so the bytes reach the route as they are.
    name = rapi.derived_secret_name("iam")
    bad = base64.b64encode(NOT_TEXT).decode()
    chain.api.patch(
        objects.SECRETS,
        name,
        {
            "metadata": {
                "annotations": {
                    rapi.CREDENTIAL_HASH_ANNOTATION: content_hash({"credentials": NOT_TEXT})
                }
            },
            "data": {"credentials": bad},
        },
        namespace=chain.ns,
    )
    refs = chain.wait_condition("route", "r", "ResolvedRefs", "False", "InvalidCredentials")
    assert "ServiceBackend broken" in refs["message"]
    assert "key 'credentials' is not UTF-8 text" in refs["message"]
    wait_for(lambda: set(chain.backend_credentials("r")) == {"good"}, what="broken left out")
    assert (chain.condition("route", "r", "Programmed") or {}).get("status") == "True"
    assert (chain.get("secret", name) or {})["data"]["credentials"] == bad, (
        "still undecodable: the route dealt with it, not a repair"
    )

    for value in ("sk-good-second-0002", "sk-good-third-0003"):
        chain.secret("key", apiKey=value)
        wait_for(functools.partial(serves, chain, "good", value), what=f"good key {value}")
    chain.wait_condition("route", "r", "ResolvedRefs", "False", "InvalidCredentials")
    assert failures(controller, "route", chain.ns) == [], "no route reconcile failed"
    seen = json.dumps([chain.events(), chain.get("route", "r"), controller.logs()])
    assert bad not in seen
    assert "AKIANOTTEXT0001" not in seen, "not a byte of the value in events, status or logs"


def test_a_config_over_the_secret_limit_is_refused_and_the_previous_one_kept(
    chain: AWSChain, controller: ControllerProcess
) -> None:
    chain.secret("key", apiKey="sk-" + "k" * 97)
    chain.api_key_policy("big", secret="key", targets=["big"])
    chain.backend("big")
    chain.route("r", ["big"])
    wait_for(lambda: api_key(chain, "r", "big") == "sk-" + "k" * 97, what="first config")
    config = chain.secret_data(rapi.route_config_secret_name("r")) or {}
    overhead = routeconfig.secret_size(config[rapi.ROUTE_CONFIG_KEY]) - 100
    at_limit = "sk-" + "k" * (routeconfig.MAX_SECRET_BYTES - overhead - 3)
    chain.secret("key", apiKey=at_limit)
    wait_for(lambda: api_key(chain, "r", "big") == at_limit, timeout=60, what="config at 1 MiB")
    chain.wait_condition("route", "r", "Programmed", "True", "Programmed")
    stored = chain.secret_data(rapi.route_config_secret_name("r")) or {}
    assert routeconfig.secret_size(stored[rapi.ROUTE_CONFIG_KEY]) == routeconfig.MAX_SECRET_BYTES
    kept = chain.config_hash("r")

    chain.secret("key", apiKey=at_limit + "k")
    refused = chain.wait_condition(
        "route", "r", "Programmed", "False", "ConfigTooLarge", timeout=60
    )
    assert f"{routeconfig.MAX_SECRET_BYTES + 1} bytes" in refused["message"]
    assert "keeps the previous configuration, which is stale" in refused["message"]
    wait_for(lambda: "ConfigTooLarge" in chain.event_reasons("r"), what="Warning event")
    assert chain.config_hash("r") == kept, "the previous configuration stays"

    chain.secret("key", apiKey="sk-small-again-0001")
    wait_for(lambda: api_key(chain, "r", "big") == "sk-small-again-0001", what="recovered")
    chain.wait_condition("route", "r", "Programmed", "True", "Programmed")
    assert failures(controller, "route", chain.ns) == [], "refused, not retried as an error"


def test_the_expiry_metric_is_there_after_a_restart_whose_first_refresh_fails(
    chain: AWSChain, oidc_issuer: OIDCIssuer, sts: STSProxy, controller: ControllerProcess
) -> None:
    client = f"client-{chain.ns}"
    oidc_issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    chain.aws_policy("oidc", [], oidc_source(oidc_issuer, client))
    chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
    expires = chain.expiration("oidc")
    labels = {"namespace": chain.ns, "name": "oidc", "type": "AWSCredentials"}
    controller.stop()
    try:
        sts.set_mode("fail")
        # while it is down, a refresh becomes due at once (as after a long outage)
        chain.request_rotation("oidc", "after-restart")
        controller.start()
        failing = chain.wait_condition(
            "policy", "oidc", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "ServiceUnavailable" in failing["message"]
        status = (chain.get("policy", "oidc") or {})["status"]
        assert status["failedAttempts"] >= 1, "no refresh has succeeded since the restart"
        assert (
            controller.metric("rotator_credential_expiration_timestamp_seconds", **labels)
            == expires
        ), "the alert sees the served credential's expiry"
        renewal = controller.metric("rotator_credential_renewal_timestamp_seconds", **labels)
        assert renewal is not None
        assert renewal >= time.time() - 5, "the next retry, not a time in the past"
    finally:
        sts.set_mode("ok")
        if controller.proc is None:
            controller.start()
    chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=120)


def test_an_edited_state_annotation_is_reported_and_repaired_without_a_crash_loop(
    chain: AWSChain, moto: str, controller: ControllerProcess
) -> None:
    user = iam_policy(chain, moto, "iam", [])
    chain.wait_condition("policy", "iam", "Ready", "True", "CredentialsReady", timeout=60)
    served = chain.aws_keys("iam")
    assert served is not None
    # A key mid-retirement whose retirement time was then edited by hand.
    retiring = iam_client(moto).create_access_key(UserName=user)["AccessKey"]["AccessKeyId"]
    wait_for(controller.idle, what="settled")
    edited_at = time.time()
    chain.api.patch(
        objects.SECRETS,
        rapi.derived_secret_name("iam"),
        {"metadata": {"annotations": {PREVIOUS: retiring, RETIRE: "tomorrow morning"}}},
        namespace=chain.ns,
    )

    def warning() -> dict[str, Any] | None:
        return next(
            (
                e
                for e in chain.events()
                if e["involvedObject"]["name"] == "iam" and e["reason"] == "MalformedAnnotation"
            ),
            None,
        )

    event = wait_for(warning, what="a Warning naming the annotation")
    assert event["type"] == "Warning"
    assert RETIRE in event["message"]
    wait_for(lambda: retiring not in user_keys(moto, user), what="the retiring key deleted")
    wait_for(
        lambda: (
            (keys := chain.aws_keys("iam")) is not None
            and user_keys(moto, user) == {keys.access_key_id}
            and PREVIOUS not in derived_annotations(chain, "iam")
            and RETIRE not in derived_annotations(chain, "iam")
        ),
        timeout=60,
        what="one served key, no state left (the replaced key retired after its grace)",
    )
    chain.wait_condition("policy", "iam", "Ready", "True", "CredentialsReady")
    wait_for(controller.idle, what="settled after the repair")
    assert failures(controller, "backendsecuritypolicy", chain.ns) == [], "never raised"
    reconciles = reconciles_of(controller, f"backendsecuritypolicy:{chain.ns}/iam", since=edited_at)
    print(f"\n{reconciles} reconciles of the policy from the edit to a settled repair")
    assert reconciles <= 8, "a bounded repair, not a loop"

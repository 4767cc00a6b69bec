"""The stand-ins of the controller's own identity refuse what the real endpoints refuse: IMDS
without ``Metadata: true``, a proxied request, an identity not assigned to the host; App
Service without its ``X-IDENTITY-HEADER``; the GCE metadata server without
``Metadata-Flavor: Google`` — so an e2e test passing against them means the SDKs sent what the
real ones need. They also fail and hang on demand, and Google's IAM stand-in accepts the
metadata server's tokens, as Google's IAM does."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.exceptions import RefreshError
from google.auth.transport.requests import Request as GoogleRequest
from google.oauth2 import service_account

from rotator_devkit.devenv.standins.azure_identity import (
    APP_SERVICE_PATH,
    IMDS_PATH,
    SYSTEM_ASSIGNED,
    ManagedIdentityStandIn,
)
from rotator_devkit.devenv.standins.gce_metadata import TOKEN_KIND, GCEMetadataServer
from rotator_devkit.devenv.standins.gcp import GCPStandIn

RESOURCE = "https://cognitiveservices.azure.com"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


def get(
    url: str, headers: dict[str, str] | None = None, *, body: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, got, raw = answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        status, got, raw = exc.code, dict(exc.headers), exc.read()
    try:
        return status, got, json.loads(raw)
    except ValueError:
        return status, got, raw.decode()


@pytest.fixture
def imds() -> Iterator[ManagedIdentityStandIn]:
    standin = ManagedIdentityStandIn(lifetime=60, user_assigned=("uai-1",)).start()
    yield standin
    standin.stop()


@pytest.fixture
def google() -> Iterator[GCPStandIn]:
    standin = GCPStandIn(lifetime=60).start()
    yield standin
    standin.stop()


@pytest.fixture
def metadata(google: GCPStandIn) -> Iterator[GCEMetadataServer]:
    standin = GCEMetadataServer(google, lifetime=60).start()
    yield standin
    standin.stop()


def imds_url(imds: ManagedIdentityStandIn, extra: str = "") -> str:
    return f"{imds.authority_host}{IMDS_PATH}?api-version=2018-02-01&resource={RESOURCE}{extra}"


def test_imds_answers_only_with_the_metadata_header_and_for_assigned_identities(
    imds: ManagedIdentityStandIn,
) -> None:
    assert get(imds_url(imds))[0] == 400, "no Metadata: true"
    proxied = get(imds_url(imds), {"Metadata": "true", "X-Forwarded-For": "10.0.0.1"})
    assert proxied[0] == 400
    unknown = get(imds_url(imds, "&client_id=someone-else"), {"Metadata": "true"})
    assert unknown[0:3:2] == (
        400,
        {"error": "invalid_request", "error_description": "Identity not found"},
    )
    by_object = get(imds_url(imds, "&object_id=o"), {"Metadata": "true"})
    assert by_object[0] == 400
    assert imds.count("refused") == 4

    status, _, answer = get(imds_url(imds, "&client_id=uai-1"), {"Metadata": "true"})
    assert status == 200
    assert answer["expires_in"] == "60", "IMDS's numbers are strings"
    issued = imds.was_issued(answer["access_token"])
    assert issued is not None
    assert (issued.identity, issued.resource, issued.endpoint) == ("uai-1", RESOURCE, "imds")
    assert int(answer["expires_on"]) == issued.expires_on
    status, _, answer = get(imds_url(imds), {"Metadata": "true"})
    assert status == 200
    assert imds.was_issued(answer["access_token"]).identity == SYSTEM_ASSIGNED  # type: ignore[union-attr]
    assert answer["access_token"] in imds.issued_values(), "for the leak scans"
    imds.system_assigned = False
    assert get(imds_url(imds), {"Metadata": "true"})[0] == 400


def test_app_service_endpoint_needs_its_identity_header(imds: ManagedIdentityStandIn) -> None:
    url = f"{imds.identity_endpoint}?api-version=2019-08-01&resource={RESOURCE}&client_id=uai-1"
    assert imds.identity_endpoint.endswith(APP_SERVICE_PATH)
    assert get(url)[0] == 401
    assert get(url, {"X-IDENTITY-HEADER": "guess"})[0] == 401
    status, _, answer = get(url, {"X-IDENTITY-HEADER": imds.identity_header})
    assert status == 200
    assert "expires_in" not in answer, "App Service says when, not how long"
    issued = imds.was_issued(answer["access_token"])
    assert issued is not None
    assert (issued.endpoint, int(answer["expires_on"])) == ("app-service", issued.expires_on)
    assert imds.identity_header in imds.issued_values(), "the header is a secret too"


def test_managed_identity_endpoints_fail_and_hang_on_demand(imds: ManagedIdentityStandIn) -> None:
    imds.set_mode("fail")
    status, _, answer = get(imds_url(imds), {"Metadata": "true"})
    assert (status, answer["error"], answer["statusCode"]) == (503, "temporarily_unavailable", 503)
    imds.set_mode("hang")
    answers: list[int] = []
    caller = threading.Thread(
        target=lambda: answers.append(get(imds_url(imds), {"Metadata": "true"})[0])
    )
    caller.start()
    caller.join(0.5)
    assert caller.is_alive(), "hangs"
    imds.set_mode("ok")
    caller.join(10)
    assert answers == [200], "answers once released"
    assert imds.count("failed") == 1


def test_metadata_server_needs_the_flavor_header(
    metadata: GCEMetadataServer, google: GCPStandIn
) -> None:
    root = f"http://{metadata.host}"
    status, headers, _ = get(root + "/")
    assert (status, headers.get("Metadata-Flavor")) == (200, "Google"), "ADC's ping"
    assert get(root + TOKEN_PATH)[0] == 403
    assert (
        get(root + TOKEN_PATH, {"Metadata-Flavor": "Google", "X-Forwarded-For": "1.2.3.4"})[0]
        == 403
    )
    flavor = {"Metadata-Flavor": "Google"}
    other = "/computeMetadata/v1/instance/service-accounts/someone@x.iam.gserviceaccount.com/token"
    assert get(root + other, flavor)[0] == 404
    assert metadata.count("refused") == 3

    status, _, answer = get(root + TOKEN_PATH + "?scopes=a,b", flavor)
    assert (status, answer["expires_in"], answer["token_type"]) == (200, 60, "Bearer")
    assert google.was_issued(answer["access_token"]) == TOKEN_KIND
    assert metadata.scopes_asked == ["a,b"]
    info = get(
        root + "/computeMetadata/v1/instance/service-accounts/default/?recursive=true", flavor
    )
    assert info[2]["email"] == metadata.email
    assert get(root + "/computeMetadata/v1/project/project-id", flavor)[2] == metadata.project

    # Google's IAM takes the metadata server's token as a bearer, and no made-up one
    google.service_accounts.add("target@p.iam.gserviceaccount.com")
    impersonate = (
        f"{google.url}/v1/projects/-/serviceAccounts/target@p.iam.gserviceaccount.com"
        ":generateAccessToken"
    )
    body = json.dumps({"scope": ["https://www.googleapis.com/auth/cloud-platform"]}).encode()
    made_up = get(impersonate, {"Authorization": "Bearer ya29.made-up"}, body=body)
    assert made_up[0] == 401
    status, _, answer = get(
        impersonate, {"Authorization": f"Bearer {answer['access_token']}"}, body=body
    )
    assert status == 200
    assert google.was_issued(answer["accessToken"]) == "impersonated"


def _service_account_token(key: dict[str, Any]) -> str:
    """An access token for ``key`` (a key file), asked the way rotator asks: google-auth's
    service-account credentials, which sign the JWT-bearer assertion and name the key (kid)."""
    credentials = service_account.Credentials.from_service_account_info(
        key, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    credentials.refresh(GoogleRequest())
    return str(credentials.token)


def test_every_key_of_a_service_account_stays_valid_and_each_is_named_by_its_id(
    google: GCPStandIn,
) -> None:
    """A second key made for an account (a registration retried) must not invalidate the first
    one a Secret already holds. An assertion is verified with the key its header names, or,
    naming none, with any of the account's keys; never with another account's."""
    email = "keys@test-project.iam.gserviceaccount.com"
    first, second = google.service_account_key(email), google.service_account_key(email)
    assert first["private_key_id"] != second["private_key_id"]
    for key in (first, second, first):
        assert google.was_issued(_service_account_token(key)) == "service-account"

    # without a key id (Google's documented header has none), any of the account's keys
    for key in (first, second):
        unnamed = {k: v for k, v in key.items() if k != "private_key_id"}
        assert google.was_issued(_service_account_token(unnamed)) == "service-account"
    assert google.count("oauth") == 5

    # a valid key of the account, presented under an id the account has no key of
    with pytest.raises(RefreshError, match="unknown key id"):
        _service_account_token({**first, "private_key_id": "0" * 40})
    other = google.service_account_key("other@test-project.iam.gserviceaccount.com")
    # another account's key under its own id, claiming to be this account
    with pytest.raises(RefreshError, match="unknown key id"):
        _service_account_token({**other, "client_email": email})
    # ... under the id of one of this account's keys
    forged = {**other, "client_email": email, "private_key_id": first["private_key_id"]}
    with pytest.raises(RefreshError, match="InvalidSignatureError"):
        _service_account_token(forged)
    # ... with no id at all
    unnamed = {k: v for k, v in other.items() if k != "private_key_id"}
    with pytest.raises(RefreshError, match="InvalidSignatureError"):
        _service_account_token({**unnamed, "client_email": email})
    assert google.count("oauth") == 5

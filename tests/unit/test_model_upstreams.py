"""The model API stand-ins answer only a current credential and record every request's verdict,
never the credential: an OpenAI key it was told to accept, a Bedrock request signed (SigV4) by a
session the STS keyring holds and not past its end, an Azure bearer token the Azure AD stand-in
minted and not expired, a Google access token the Google stand-in minted and not expired, on
the project's path, for a model named with its publisher (Vertex AI)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from rotator_devkit.devenv.standins import aws, upstreams
from rotator_devkit.devenv.standins.azure import App, AzureStandIn, tls_context
from rotator_devkit.devenv.standins.gcp import GCPStandIn

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def post(url: str, headers: dict[str, str], body: bytes = BODY) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_openai_accepts_only_the_keys_it_was_given_and_tells_a_retired_key_from_unknown() -> None:
    up = upstreams.OpenAIStandIn().start()
    try:
        up.accept("sk-old-key-0001", "sk-new-key-0002")
        url = up.url + "/v1/chat/completions"
        assert post(url, {"Authorization": "Bearer sk-old-key-0001"}) == 200
        up.accept("sk-new-key-0002")  # the old key retired
        assert post(url, {"Authorization": "Bearer sk-old-key-0001"}) == 401
        assert post(url, {"Authorization": "Bearer sk-new-key-0002"}) == 200
        assert post(url, {}) == 401
        assert post(url, {"Authorization": "Bearer sk-never-given-0003"}) == 401
        seen = up.seen_snapshot()
        assert [s.verdict for s in seen] == ["current", "expired", "current", "missing", "unknown"]
        assert "sk-" not in repr(seen)
    finally:
        up.stop()


def signed(url: str, key_id: str, secret: str, token: str | None) -> dict[str, str]:
    request = AWSRequest(
        method="POST", url=url, data=BODY, headers={"Content-Type": "application/json"}
    )
    SigV4Auth(Credentials(key_id, secret, token), "bedrock", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def test_bedrock_checks_the_signature_the_session_token_and_the_session_end() -> None:
    now = [time.time()]
    keyring = aws.Keyring()
    keyring.add("ASIACURRENT", aws.Issued("secret-current", "token-current", now[0] + 60))
    up = upstreams.BedrockStandIn(keyring, now=lambda: now[0]).start()
    try:
        url = up.url + "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
        assert post(url, signed(url, "ASIACURRENT", "secret-current", "token-current")) == 200
        assert post(url, signed(url, "ASIACURRENT", "secret-wrong", "token-current")) == 403
        assert post(url, signed(url, "ASIACURRENT", "secret-current", "token-wrong")) == 403
        headers = signed(url, "ASIACURRENT", "secret-current", "token-current")
        now[0] += 61  # the session ended
        assert post(url, headers) == 403
        verdicts = [s.verdict for s in up.seen_snapshot()]
        assert verdicts == ["current", "unknown", "unknown", "expired"]
        assert not any("secret" in repr(s) or "token-" in repr(s) for s in up.seen_snapshot())
    finally:
        up.stop()


@pytest.fixture
def azure_ad(tmp_path: Path) -> AzureStandIn:
    context, ca_file = tls_context(tmp_path)
    standin = AzureStandIn(context, ca_file, lifetime=60).start()
    standin.apps["app"] = App("tenant", secret="azure-secret-value-01")
    return standin


def test_azure_openai_takes_a_token_the_azure_stand_in_minted_until_it_expires(
    azure_ad: AzureStandIn,
) -> None:
    form = "grant_type=client_credentials&client_id=app&client_secret=azure-secret-value-01"
    form += "&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default"
    context = ssl.create_default_context(cafile=str(azure_ad.ca_file))
    request = urllib.request.Request(
        azure_ad.url + "/tenant/oauth2/v2.0/token", data=form.encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        token = json.load(response)["access_token"]
    now = [time.time()]
    up = upstreams.AzureOpenAIStandIn(azure_ad, now=lambda: now[0]).start()
    try:
        url = up.url + "/openai/deployments/d/chat/completions?api-version=2024-10-21"
        assert post(url, {"Authorization": f"Bearer {token}"}) == 200
        assert post(url, {"Authorization": "Bearer eyJ0eXAiOiJKV1Qi.not-minted"}) == 401
        now[0] += 61
        assert post(url, {"Authorization": f"Bearer {token}"}) == 401
        assert [s.verdict for s in up.seen_snapshot()] == ["current", "unknown", "expired"]
        assert token not in repr(up.seen_snapshot())
    finally:
        up.stop()
        azure_ad.stop()


def test_vertex_ai_takes_a_google_token_until_it_expires_on_its_project_for_a_publisher_model() -> (
    None
):
    google = GCPStandIn(lifetime=60)
    token = google.issue("federated", 60)
    now = [time.time()]
    up = upstreams.VertexAIStandIn(
        google, locations={("my-project", "us-central1")}, now=lambda: now[0]
    ).start()
    gemini = json.dumps({"model": "google/gemini-2.0-flash", "messages": []}).encode()
    bare = json.dumps({"model": "gemini-2.0-flash", "messages": []}).encode()
    path = "/v1/projects/{}/locations/us-central1/endpoints/openapi/chat/completions"
    url = up.url + path.format("my-project")
    bearer = {"Authorization": f"Bearer {token}"}
    other_region = url.replace("us-central1", "europe-west4")
    try:
        assert post(url, bearer, gemini) == 200
        assert post(url, bearer, bare) == 400  # Vertex AI wants <publisher>/<model>
        assert post(up.url + path.format("other-project"), bearer, gemini) == 404
        assert post(other_region, bearer, gemini) == 404
        assert post(up.url + "/v1/chat/completions", bearer, gemini) == 404
        assert post(url, {"Authorization": "Bearer ya29.not-minted"}, gemini) == 401
        assert post(url, {}, gemini) == 401
        now[0] += 61  # the token's hour (here: minute) is over
        assert post(url, bearer, gemini) == 401
        assert post(url, bearer, bare) == 401  # the credential first, as Vertex AI checks
        verdicts = [s.verdict for s in up.seen_snapshot()]
        assert verdicts == [
            "current",
            *["refused"] * 4,  # not a use of the token: no rotation counts them as served
            "unknown",
            "missing",
            "expired",
            "expired",
        ]
        assert token not in repr(up.seen_snapshot())
    finally:
        up.stop()

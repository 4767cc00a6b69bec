"""The model API stand-ins answer only a current credential and record every request's verdict,
never the credential: an OpenAI key it was told to accept, a Bedrock request signed (SigV4) by a
session the STS keyring holds and not past its end, an Azure bearer token the Azure AD stand-in
minted and not expired, a Google access token the Google stand-in minted and not expired, on
the project's path, for a model named with its publisher (Vertex AI)."""

from __future__ import annotations

import hashlib
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
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


OPENAI_V1 = "/openai/v1/chat/completions"


def test_bedrock_serves_its_openai_compatible_chat_completions_with_the_same_sigv4_check() -> None:
    now = [time.time()]
    keyring = aws.Keyring()
    keyring.add("ASIACURRENT", aws.Issued("secret-current", "token-current", now[0] + 60))
    up = upstreams.BedrockStandIn(keyring, now=lambda: now[0]).start()
    try:
        url = up.url + OPENAI_V1
        request = urllib.request.Request(
            url, data=BODY, headers=signed(url, "ASIACURRENT", "secret-current", "token-current")
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.load(response)
        assert answer["object"] == "chat.completion"
        assert answer["model"] == "m"
        assert post(url, signed(url, "ASIACURRENT", "secret-wrong", "token-current")) == 403
        assert post(url, signed(url, "ASIAUNKNOWN", "secret-current", "token-current")) == 403
        other = up.url + "/openai/v1/completions"  # not a path it serves
        assert post(other, signed(other, "ASIACURRENT", "secret-current", "token-current")) == 404
        headers = signed(url, "ASIACURRENT", "secret-current", "token-current")
        now[0] += 61  # the session ended
        assert post(url, headers) == 403
        verdicts = [s.verdict for s in up.seen_snapshot()]
        assert verdicts == ["current", "unknown", "unknown", "refused", "expired"]
        assert {s.path for s in up.seen_snapshot()} >= {OPENAI_V1}
    finally:
        up.stop()


class EnvoyLikeSigner(SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """Signs every header the request carries, as Envoy's aws_request_signing filter does (all
    but x-forwarded-* and x-amzn-trace-id): user-agent too, which botocore's signer leaves out,
    so a check that rebuilt the list botocore's way would refuse Envoy's requests."""

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        every = HTTPHeaders()
        for name, value in request.headers.items():
            every[name.lower()] = value
        return every


def envoy_signed(url: str, host: str, body: bytes = BODY) -> dict[str, str]:
    """Headers of a request signed the way Envoy signs it for Bedrock: a ``host`` with its port,
    ``x-amz-content-sha256`` sent (the body's hash), and the client's own headers."""
    headers = {
        "Accept": "application/json",
        "Content-Length": str(len(body)),
        "Content-Type": "application/json",
        "Host": host,
        "User-Agent": "curl/8.5.0",
        "X-Amz-Content-Sha256": hashlib.sha256(body).hexdigest(),
    }
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    credentials = Credentials("ASIACURRENT", "secret-current", "token-current")
    EnvoyLikeSigner(credentials, "bedrock", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def test_bedrock_verifies_a_request_signed_as_envoy_signs_it() -> None:
    keyring = aws.Keyring()
    keyring.add("ASIACURRENT", aws.Issued("secret-current", "token-current", time.time() + 60))
    up = upstreams.BedrockStandIn(keyring).start()
    try:
        host = up.url.removeprefix("http://")  # 127.0.0.1:<port>: the port is signed
        url = up.url + OPENAI_V1
        headers = envoy_signed(url, host)
        auth = headers["Authorization"]
        assert (
            "SignedHeaders=accept;content-length;content-type;host;user-agent;"
            "x-amz-content-sha256;x-amz-date;x-amz-security-token," in auth
        )
        assert post(url, headers) == 200
        # the same signature over another body: the sent payload hash no longer matches
        other = json.dumps({"model": "n", "messages": []}).encode()
        assert post(url, {**headers, "Content-Length": str(len(other))}, other) == 403
        # signed for another port than the Host received: the port is part of what was signed
        assert post(url, {**envoy_signed(url, "127.0.0.1:1"), "Host": host}) == 403
        assert [s.verdict for s in up.seen_snapshot()] == ["current", "unknown", "unknown"]
    finally:
        up.stop()


@pytest.fixture
def azure_ad(tmp_path: Path) -> AzureStandIn:
    context, ca_file = tls_context(tmp_path)
    standin = AzureStandIn(context, ca_file, lifetime=60).start()
    standin.apps["app"] = App("tenant", secret="azure-secret-value-01")
    return standin


def azure_token(azure_ad: AzureStandIn) -> str:
    """A token the Azure AD stand-in mints for the app, as a client gets one (client secret)."""
    form = "grant_type=client_credentials&client_id=app&client_secret=azure-secret-value-01"
    form += "&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default"
    context = ssl.create_default_context(cafile=str(azure_ad.ca_file))
    request = urllib.request.Request(
        azure_ad.url + "/tenant/oauth2/v2.0/token", data=form.encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return str(json.load(response)["access_token"])


def test_azure_openai_takes_a_token_the_azure_stand_in_minted_until_it_expires(
    azure_ad: AzureStandIn,
) -> None:
    token = azure_token(azure_ad)
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


def test_azure_openai_v1_api_takes_the_same_credentials_with_the_model_in_the_body(
    azure_ad: AzureStandIn,
) -> None:
    token = azure_token(azure_ad)
    now = [time.time()]
    up = upstreams.AzureOpenAIStandIn(azure_ad, now=lambda: now[0]).start()
    up.accept_keys("azure-api-key-0001")
    try:
        url = up.url + OPENAI_V1
        request = urllib.request.Request(
            url, data=BODY, headers={"Authorization": f"Bearer {token}"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["object"] == "chat.completion"
        assert post(url, {"Authorization": "Bearer eyJ0eXAiOiJKV1Qi.not-minted"}) == 401
        assert post(url, {"api-key": "azure-api-key-0001"}) == 200
        assert post(url, {"api-key": "azure-api-key-0002"}) == 401
        assert post(url, {}) == 401
        assert (
            post(up.url + "/openai/v1/deployments/d/chat", {"api-key": "azure-api-key-0001"}) == 404
        )
        now[0] += 61
        assert post(url, {"Authorization": f"Bearer {token}"}) == 401
        verdicts = [s.verdict for s in up.seen_snapshot()]
        assert verdicts == [
            "current",
            "unknown",
            "current",
            "unknown",
            "missing",
            "refused",
            "expired",
        ]
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

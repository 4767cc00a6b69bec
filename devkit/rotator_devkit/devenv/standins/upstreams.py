"""Model API stand-ins that a gateway (LiteLLM's proxy) sends traffic to, each checking the
credential the way the real API does, and recording every request with what it found:

* :class:`OpenAIStandIn` — ``POST /v1/chat/completions``; ``Authorization: Bearer <key>`` must be
  one of the keys it currently accepts (:meth:`OpenAIStandIn.accept`; a retired key is refused,
  as OpenAI refuses a revoked one, and recorded ``expired``: its overlap is over).
* :class:`BedrockStandIn` — ``POST /model/{id}/converse`` (and ``/invoke``), as LiteLLM calls
  it, and ``POST /openai/v1/chat/completions``, Bedrock runtime's OpenAI-compatible endpoint (the
  model in the body), as an Envoy route calls it: on every path the SigV4 signature, the session
  token and the session's end are checked by :func:`aws.verify_received` against the
  :class:`aws.Keyring` the STS proxy filled with what moto issued: the same check as the STS
  proxy's own, not a second one.
* :class:`AzureOpenAIStandIn` — ``POST /openai/deployments/{d}/chat/completions`` (LiteLLM) and
  ``POST /openai/v1/chat/completions`` (Azure OpenAI's v1 API, the model in the body: Envoy): the
  bearer token must be one the Azure AD stand-in minted and not yet expired
  (:meth:`AzureStandIn.expires_at`); or an ``api-key`` it accepts.
* :class:`VertexAIStandIn` — Vertex AI's OpenAI-compatible endpoint, ``POST
  /v1/projects/{project}/locations/{location}/endpoints/openapi/chat/completions``: the bearer
  token must be one the Google token services' stand-in minted and not yet expired
  (:meth:`GCPStandIn.expires_at`), the model named with its publisher (``google/…``), as
  Vertex AI requires.

A :class:`Seen` record holds a verdict, never a credential's bytes: ``current`` (accepted),
``expired`` (issued, past its end — for an API key, accepted once and since retired: the one
thing a gateway must never send), ``unknown`` (never issued), ``missing``, or ``refused`` (a
current credential on a request answered 404 or 400). The clock is
injected (``now``) so the verdicts follow the same time as the issuers'.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from rotator_devkit.devenv.standins import aws
from rotator_devkit.devenv.standins.azure import AzureStandIn
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.httpstub import Stub

CURRENT, EXPIRED, UNKNOWN, MISSING = "current", "expired", "unknown", "missing"
REFUSED = "refused"
"""A current credential on a request refused for another reason (a path not served, a model
not named as the API wants): not a use of the credential."""
OPENAI_V1_CHAT = "/openai/v1/chat/completions"
"""The OpenAI-compatible chat completions path of both Azure OpenAI's v1 API and Bedrock
runtime: where an Envoy route sends ``/v1/chat/completions`` for those two providers."""


@dataclass(frozen=True)
class Seen:
    """One request an upstream received: when, on which path, and what its credential was;
    ``credential`` is a short label (the access key id of AWS keys, a counter for tokens), never
    a secret."""

    at: float
    path: str
    verdict: str
    credential: str


class ModelUpstream(Stub):
    """A model API that records every request (:attr:`seen`) and answers only a current
    credential, with a minimal response of its API's shape."""

    def __init__(self, *, now: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.now = now
        self.seen: list[Seen] = []
        self._seen_lock = threading.Lock()

    def seen_snapshot(self) -> list[Seen]:
        with self._seen_lock:
            return list(self.seen)

    @staticmethod
    def label(credential: str) -> str:
        """A stable name for a credential that is not the credential: ``#`` and the start of
        its SHA-256, so that a test elsewhere (the kind suite, beside a Pod of these) names the
        credential it read from a derived Secret the same way."""
        return "#" + hashlib.sha256(credential.encode()).hexdigest()[:12]

    def seen_json(self) -> list[list[Any]]:
        """:meth:`seen_snapshot` as JSON rows ``[at, path, verdict, credential]``."""
        return [[s.at, s.path, s.verdict, s.credential] for s in self.seen_snapshot()]

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        path = handler.path.split("?")[0]
        verdict, label = self.check(handler, body)
        served = method == "POST" and self.serves(path)
        invalid = self.invalid(body) if served and verdict == CURRENT else None
        # a current credential on a request that is not answered is not a use of it: recorded
        # REFUSED, so that no count of served rotations includes it; any other verdict is kept
        # (an expired credential sent is the one thing a gateway must never do, path or not)
        recorded = REFUSED if verdict == CURRENT and (not served or invalid) else verdict
        with self._seen_lock:
            self.seen.append(Seen(self.now(), path, recorded, label))
        self.counted(recorded)
        if not served:
            return self.reply(handler, 404, b'{"error": "not found"}', "application/json")
        if verdict != CURRENT:
            status, answer = self.refusal(verdict)
            return self.reply(handler, status, answer, "application/json")
        if invalid is not None:
            return self.reply(handler, 400, json.dumps(invalid).encode(), "application/json")
        self.reply(handler, 200, json.dumps(self.answer(path, body)).encode(), "application/json")

    # --- for subclasses ----------------------------------------------------------------------

    def check(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str]:
        raise NotImplementedError

    def serves(self, path: str) -> bool:
        raise NotImplementedError

    def answer(self, path: str, body: bytes) -> dict[str, Any]:
        return chat_completion(_model(body))

    def bearer(
        self, handler: BaseHTTPRequestHandler, expires_at: Callable[[str], float | None]
    ) -> tuple[str, str] | None:
        """The verdict on an ``Authorization: Bearer`` token an issuer minted, by its end
        (``expires_at``: None for a token it never minted); None without such a header."""
        scheme, _, token = (handler.headers.get("Authorization") or "").partition(" ")
        if scheme != "Bearer" or not token:
            return None
        expires = expires_at(token)
        if expires is None:
            return UNKNOWN, self.label(token)
        return (CURRENT if self.now() < expires else EXPIRED), self.label(token)

    def invalid(self, body: bytes) -> dict[str, Any] | None:
        """The error answer (400) to an authenticated request the API would refuse; None when
        it would serve it. Checked after the credential, as the real APIs do."""
        return None

    def refusal(self, verdict: str) -> tuple[int, bytes]:
        return 401, json.dumps({"error": {"message": f"credential {verdict}"}}).encode()


def chat_completion(model: str) -> dict[str, Any]:
    """The smallest answer an OpenAI client (and LiteLLM) parses as a chat completion."""
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _model(body: bytes) -> str:
    try:
        return str(json.loads(body or b"{}").get("model") or "standin")
    except (ValueError, AttributeError):
        return "standin"


class OpenAIStandIn(ModelUpstream):
    """An OpenAI-compatible API that accepts only the keys given to :meth:`accept`."""

    def __init__(self, *, now: Callable[[], float] = time.time) -> None:
        super().__init__(now=now)
        self._keys: set[str] = set()
        self._retired: set[str] = set()

    def accept(self, *keys: str) -> None:
        """The keys accepted from now on. A key accepted before and not now is retired: its
        validity (the rotation's overlap) is over, so it is refused as ``expired``, which a
        gateway must never send, and told apart from a key never given (``unknown``)."""
        with self._lock:
            self._retired = (self._retired | self._keys) - set(keys)
            self._keys = set(keys)
        self.remember(*keys)

    def add_keys(self, *keys: str) -> None:
        """Accepts ``keys`` too (a second key beside the first: a rotation's overlap begins)."""
        with self._lock:
            self._keys |= set(keys)
            self._retired -= set(keys)
        self.remember(*keys)

    def retire_keys(self, *keys: str) -> None:
        """Refuses ``keys`` from now on, as ``expired`` (the overlap is over: the key revoked)."""
        with self._lock:
            self._retired |= set(keys)
            self._keys -= set(keys)
        self.remember(*keys)

    def accepted(self) -> list[str]:
        """The labels (:meth:`ModelUpstream.label`) of the keys accepted now."""
        with self._lock:
            return sorted(self.label(k) for k in self._keys)

    def check(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str]:
        scheme, _, key = (handler.headers.get("Authorization") or "").partition(" ")
        if scheme != "Bearer" or not key:
            return MISSING, "-"
        with self._lock:
            verdict = CURRENT if key in self._keys else EXPIRED if key in self._retired else UNKNOWN
        return verdict, self.label(key)

    def serves(self, path: str) -> bool:
        return path.endswith("/chat/completions")


class AzureOpenAIStandIn(ModelUpstream):
    """Azure OpenAI: a bearer token minted by ``identity`` (the Azure AD stand-in) and not
    expired, or an ``api-key`` given to :meth:`accept_keys`."""

    def __init__(self, identity: AzureStandIn, *, now: Callable[[], float] = time.time) -> None:
        super().__init__(now=now)
        self.identity = identity
        self._keys: set[str] = set()

    def accept_keys(self, *keys: str) -> None:
        with self._lock:
            self._keys = set(keys)
        self.remember(*keys)

    def check(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str]:
        if (bearer := self.bearer(handler, self.identity.expires_at)) is not None:
            return bearer
        key = handler.headers.get("api-key") or ""
        if not key:
            return MISSING, "-"
        with self._lock:
            known = key in self._keys
        return (CURRENT if known else UNKNOWN), self.label(key)

    def serves(self, path: str) -> bool:
        # the deployment-scoped API (LiteLLM's azure/ models) or the v1 API, whose one path
        # names no deployment (the model is in the body: Envoy rewrites /v1/ to /openai/v1/)
        return path == OPENAI_V1_CHAT or (
            path.startswith("/openai/deployments/") and path.endswith("/chat/completions")
        )


class BedrockStandIn(ModelUpstream):
    """Bedrock runtime: every request signed with SigV4 by a key in ``keyring`` (what the STS
    proxy recorded from moto), with its session token, before the session's end."""

    def __init__(self, keyring: aws.Keyring, *, now: Callable[[], float] = time.time) -> None:
        super().__init__(now=now)
        self.keyring = keyring

    def check(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str]:
        key_id = aws.signer(handler) or "-"
        refusal = aws.verify_received(
            self.keyring, handler, body, scheme=self.scheme, now=self.now()
        )
        if refusal is None:
            return CURRENT, key_id
        if refusal is aws.EXPIRED:
            return EXPIRED, key_id
        return (MISSING if refusal is aws.MISSING else UNKNOWN), key_id

    def serves(self, path: str) -> bool:
        # the native runtime API (LiteLLM's bedrock/ models) or the OpenAI-compatible one
        # (Envoy rewrites /v1/ to /openai/v1/): the same SigV4 check on both
        return path == OPENAI_V1_CHAT or (
            path.startswith("/model/") and path.rsplit("/", 1)[-1] in ("converse", "invoke")
        )

    def answer(self, path: str, body: bytes) -> dict[str, Any]:
        if path == OPENAI_V1_CHAT:
            return chat_completion(_model(body))
        if path.endswith("/converse"):
            return {
                "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                "metrics": {"latencyMs": 1},
            }
        return {  # /invoke of an Anthropic model: the Messages API's shape
            "id": "msg-standin",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    def refusal(self, verdict: str) -> tuple[int, bytes]:
        code = "ExpiredTokenException" if verdict == EXPIRED else "UnrecognizedClientException"
        return 403, json.dumps({"message": f"credential {verdict}", "__type": code}).encode()


class VertexAIStandIn(ModelUpstream):
    """Vertex AI's OpenAI-compatible chat completions: a bearer token minted by ``google`` (the
    Google token services' stand-in: STS, IAM credentials, OAuth, a metadata server) and not
    expired, on a project and location path, for a model named ``google/<model>``.
    ``locations`` (project, region), when any, are the only ones served (any other path is
    answered 404): a gateway must put the policy's project and region in the path."""

    PREFIX = "/v1/projects/"
    SUFFIX = "/endpoints/openapi/chat/completions"
    PUBLISHER = "google/"

    def __init__(
        self,
        google: GCPStandIn,
        *,
        locations: Iterable[tuple[str, str]] = (),
        now: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(now=now)
        self.google = google
        self.locations = set(locations)
        """Added to as policies are registered (:meth:`ProviderStandIns.register`)."""

    def check(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str]:
        return self.bearer(handler, self.google.expires_at) or (MISSING, "-")

    def serves(self, path: str) -> bool:
        if not (path.startswith(self.PREFIX) and path.endswith(self.SUFFIX)):
            return False
        parts = path[len(self.PREFIX) : -len(self.SUFFIX)].split("/")
        return (
            len(parts) == 3
            and parts[1] == "locations"
            and bool(parts[0] and parts[2])
            and (not self.locations or (parts[0], parts[2]) in self.locations)
        )

    def invalid(self, body: bytes) -> dict[str, Any] | None:
        if _model(body).startswith(self.PUBLISHER):
            return None
        # Vertex AI answers 400 for a model without its publisher (``gemini-2.0-flash``)
        return {"error": {"code": 400, "message": "model must be google/<model>"}}

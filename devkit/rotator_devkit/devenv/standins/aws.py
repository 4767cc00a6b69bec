"""What the AWS stand-ins (the STS and IAM proxies in front of moto) share.

moto accepts any signature: its ``GetCallerIdentity`` looks up the access key id alone, so a
credential with a wrong secret key or session token would still "work" there. The proxies close
that gap. They record what they issued — the secret key and session token of every session
``AssumeRoleWithWebIdentity`` returned, the secret key of every IAM key ``CreateAccessKey``
returned — in a :class:`Keyring`, and :func:`verify` checks a request signed with one of those
keys the way AWS does: botocore's own SigV4 signer recomputes the signature over the request as
received (exactly the headers it names as signed, the body, the scope) with the recorded
secret, and the ``X-Amz-Security-Token`` must be the recorded one. A signer other than botocore
(Envoy's ``aws_request_signing`` filter) signs other headers — ``user-agent``, which botocore
never signs, ``x-amz-content-sha256`` — and a port in ``host``: the check takes the signed
list as given, and a payload hash sent must be the hash of the body received. A key this
module did not issue is :data:`UNKNOWN_KEY`; each proxy decides what that means (STS refuses
it, as AWS does; IAM lets tests' made-up management identities through, as moto does).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

ALGORITHM = "AWS4-HMAC-SHA256"
SKEW = 15 * 60
"""How far a request's ``X-Amz-Date`` may be from now, as in AWS."""
ACCOUNT = "123456789012"
"""moto's default account: the IAM users the stand-ins know live there."""

FORWARDED_HEADERS = (
    "content-type",
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
)


def aws_error(code: str, message: str, kind: str = "Sender") -> bytes:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        f"<Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
    ).encode()


@dataclass(frozen=True)
class Issued:
    secret_access_key: str
    session_token: str | None
    expires_at: float | None
    """Epoch seconds after which AWS refuses the key (a session's end); None for IAM keys."""
    principal: str | None = None
    """Who the key is — the role ARN of a session, the user ARN of an IAM key — for the STS
    proxy's check that a role trusts whoever asks to assume it; None: unknown."""


class Keyring:
    """Access key id → what was issued with it; shared by the STS and IAM proxies so that either
    can check a signature made with a key the other issued."""

    def __init__(self) -> None:
        self._keys: dict[str, Issued] = {}
        self._lock = threading.Lock()

    def add(self, access_key_id: str, issued: Issued) -> None:
        with self._lock:
            self._keys[access_key_id] = issued

    def revoke(self, access_key_id: str) -> None:
        with self._lock:
            self._keys.pop(access_key_id, None)

    def get(self, access_key_id: str) -> Issued | None:
        with self._lock:
            return self._keys.get(access_key_id)


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str

    def body(self) -> bytes:
        return aws_error(self.code, self.message)


MISSING = Refusal(403, "MissingAuthenticationToken", "Request is missing Authentication Token")
UNKNOWN_KEY = Refusal(
    403, "InvalidClientTokenId", "The security token included in the request is invalid."
)
WRONG_TOKEN = Refusal(
    403, "InvalidClientTokenId", "The security token included in the request is invalid"
)
EXPIRED = Refusal(403, "ExpiredToken", "The security token included in the request is expired")
WRONG_SIGNATURE = Refusal(
    403,
    "SignatureDoesNotMatch",
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method.",
)
STALE = Refusal(403, "SignatureDoesNotMatch", "Signature expired: the request time is too skewed")


def incomplete(why: str) -> Refusal:
    return Refusal(400, "IncompleteSignature", why)


@dataclass(frozen=True)
class _Authorization:
    access_key_id: str
    day: str
    region: str
    service: str
    signed_headers: list[str]
    signature: str


def verify(
    keyring: Keyring,
    *,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    now: float,
) -> Refusal | None:
    """None when the request is signed, with SigV4, by a key in ``keyring`` — the right
    signature, the recorded session token, the key not expired; the refusal AWS would answer
    otherwise. ``headers`` are the received ones, names in lower case; ``url`` is the one the
    client signed (scheme, its ``Host`` header, path and query)."""
    auth = _authorization(headers.get("authorization", ""))
    if isinstance(auth, Refusal):
        return auth
    issued = keyring.get(auth.access_key_id)
    if issued is None:
        return UNKNOWN_KEY
    if headers.get("x-amz-security-token") != issued.session_token:
        return WRONG_TOKEN
    if issued.expires_at is not None and now >= issued.expires_at:
        return EXPIRED
    return _signature(auth, issued, method=method, url=url, headers=headers, body=body, now=now)


def signer(handler: BaseHTTPRequestHandler) -> str | None:
    """The access key id a received request is signed with (its ``Authorization`` header), if
    any; say nothing of whether the signature is right (:func:`verify_received` does)."""
    auth = _authorization(handler.headers.get("Authorization", ""))
    return None if isinstance(auth, Refusal) else auth.access_key_id


def _authorization(header: str) -> _Authorization | Refusal:
    if not header:
        return MISSING
    algorithm, _, rest = header.partition(" ")
    if algorithm != ALGORITHM:
        return incomplete(f"Unsupported algorithm {algorithm}")
    fields = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    scope = fields.get("Credential", "").split("/")
    signed, signature = fields.get("SignedHeaders", ""), fields.get("Signature", "")
    if len(scope) != 5 or scope[4] != "aws4_request" or not signed or not signature:
        return incomplete("Authorization header requires Credential, SignedHeaders, Signature")
    key_id, day, region, service, _ = scope
    return _Authorization(key_id, day, region, service, signed.split(";"), signature)


def _signature(
    auth: _Authorization,
    issued: Issued,
    *,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    now: float,
) -> Refusal | None:
    """Recomputes the signature with botocore's signer over what was received."""
    timestamp = headers.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(timestamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return incomplete("X-Amz-Date is missing or malformed")
    if abs(now - signed_at) > SKEW:
        return STALE
    names = auth.signed_headers
    if (
        auth.day != timestamp[:8]
        or not {"host", "x-amz-date"} <= set(names)
        or ("x-amz-security-token" in headers and "x-amz-security-token" not in names)
        or any(name not in headers for name in names)
    ):
        return WRONG_SIGNATURE
    sent_hash = headers.get("x-amz-content-sha256")
    if sent_hash is not None and sent_hash != hashlib.sha256(body).hexdigest():
        # botocore signs a sent x-amz-content-sha256 as the payload hash without hashing the
        # body: unchecked, a signature over that header would vouch for any body
        return WRONG_SIGNATURE
    request = AWSRequest(
        method=method, url=url, headers={name: headers[name] for name in names}, data=body
    )
    request.context["timestamp"] = timestamp
    signer = _SignedHeadersOnly(
        Credentials(auth.access_key_id, issued.secret_access_key, issued.session_token),
        auth.service,
        auth.region,
    )
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    return None if hmac.compare_digest(str(expected), auth.signature) else WRONG_SIGNATURE


class _SignedHeadersOnly(SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """botocore's SigV4 over the request's headers, all of them and only them: the caller gives
    exactly those the ``SignedHeaders`` list names. botocore's own ``headers_to_sign`` leaves
    some out (``user-agent``, ``connection``, ...), which AWS signs when a client lists them, as
    Envoy's signer does (every header but ``x-forwarded-*`` and ``x-amzn-trace-id``)."""

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        exact = HTTPHeaders()
        for name, value in request.headers.items():
            exact[name.lower()] = value
        return exact


def verify_received(
    keyring: Keyring, handler: BaseHTTPRequestHandler, body: bytes, *, scheme: str, now: float
) -> Refusal | None:
    """:func:`verify` for a request a stand-in received."""
    headers = {name.lower(): value for name, value in handler.headers.items()}
    url = f"{scheme}://{headers.get('host', '')}{handler.path}"
    return verify(keyring, method=handler.command, url=url, headers=headers, body=body, now=now)


def issued_in(answer: bytes) -> tuple[str, str, str | None] | None:
    """The access key id, secret key and session token (None for an IAM key) an AWS answer
    carries (``AssumeRole*``'s ``Credentials``, ``CreateAccessKey``'s ``AccessKey``)."""
    try:
        root = ET.fromstring(answer)  # noqa: S314 - moto's answer, on loopback
    except ET.ParseError:
        return None
    found = {element.tag.rsplit("}", 1)[-1]: element.text or "" for element in root.iter()}
    if not found.get("AccessKeyId") or not found.get("SecretAccessKey"):
        return None
    return found["AccessKeyId"], found["SecretAccessKey"], found.get("SessionToken") or None


def forward(upstream: str, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes, str]:
    """Passes a request on to moto (which tells the service from the signature's scope, or the
    action), returning its status, body and content type."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() in FORWARDED_HEADERS}
    request = urllib.request.Request(  # noqa: S310 - the upstream is moto on loopback
        upstream + handler.path, data=body, headers=headers, method=handler.command
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
            return (
                response.status,
                response.read(),
                response.headers.get("Content-Type", "text/xml"),
            )
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "text/xml")

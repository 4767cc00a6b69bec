"""The GCE / GKE metadata server, as a local stand-in that checks what the real one checks.
google-auth finds it at ``GCE_METADATA_HOST`` (its calls) and ``GCE_METADATA_IP`` (its ping),
both ``host:port`` (:attr:`GCEMetadataServer.host`):

* ``GET /`` — the ping Application Default Credentials use to detect it: 200 with the
  ``Metadata-Flavor: Google`` response header;
* ``GET /computeMetadata/v1/…`` — only with the ``Metadata-Flavor: Google`` request header, and
  never for a proxied request (``X-Forwarded-For``): 403 otherwise, as the real server:

  * ``project/project-id``, ``project/numeric-project-id``, ``universe/universe-domain``;
  * ``instance/service-accounts/{default|<email>}/`` (``?recursive=true``: email, aliases, scopes),
    ``…/email``, ``…/scopes``;
  * ``instance/service-accounts/{default|<email>}/token[?scopes=…]`` — a new access token of
    the node's (GKE: the pod's workload identity's) service account, ``expires_in``
    :attr:`lifetime` seconds.

Tokens are minted by the Google token services' stand-in (``google.issue("metadata")``), so its
IAM credentials endpoint accepts them to impersonate a service account, as Google's does; they
are in its :attr:`issued` for leak scans. Counts: ``ping``, ``token``, ``refused``.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.httpstub import Stub

ROOT = "/computeMetadata/v1/"
ACCOUNTS = "instance/service-accounts/"
FLAVOR = "Metadata-Flavor"
GOOGLE = "Google"
TOKEN_KIND = "metadata"
"""What :meth:`GCPStandIn.was_issued` says of a token minted here."""


class GCEMetadataServer(Stub):
    def __init__(
        self,
        google: GCPStandIn,
        *,
        email: str = "rotator@test-project.iam.gserviceaccount.com",
        project: str = "test-project",
        lifetime: int = 60,
    ) -> None:
        super().__init__()
        self.google = google
        self.email = email
        self.project = project
        self.lifetime = lifetime
        self.scopes_asked: list[str] = []
        """The ``scopes`` of every token request, in order (empty when none was given)."""

    @property
    def host(self) -> str:
        """``host:port``, for ``GCE_METADATA_HOST`` and ``GCE_METADATA_IP``."""
        return self.url.removeprefix("http://")

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        url = urlsplit(handler.path)
        if method == "GET" and url.path == "/":
            self.counted("ping")
            return self._reply(handler, 200, "computeMetadata/\n", "application/text")
        refusal = self._refusal(handler, method, url.path)
        if refusal is not None:
            return self._refuse(handler, *refusal)
        path = url.path.removeprefix(ROOT)
        plain = {
            "project/project-id": self.project,
            "project/numeric-project-id": "123456789",
            "universe/universe-domain": "googleapis.com",
        }
        if path in plain:
            return self._reply(handler, 200, plain[path], "application/text")
        account, _, leaf = path.removeprefix(ACCOUNTS).partition("/")
        if not path.startswith(ACCOUNTS) or account not in ("default", self.email):
            return self._refuse(handler, 404, "not found")
        self._account(handler, leaf, {k: v[0] for k, v in parse_qs(url.query).items()})

    @staticmethod
    def _refusal(handler: BaseHTTPRequestHandler, method: str, path: str) -> tuple[int, str] | None:
        """Why the real server would refuse the request, if it would."""
        if not path.startswith(ROOT):
            return 404, "not found"
        if handler.headers.get(FLAVOR) != GOOGLE:
            return 403, "Missing required header: Metadata-Flavor"
        if handler.headers.get("X-Forwarded-For"):
            return 403, "Requests with X-Forwarded-For are forbidden"
        if method != "GET":
            return 405, "method not allowed"
        return None

    def _account(self, handler: BaseHTTPRequestHandler, leaf: str, query: dict[str, str]) -> None:
        scopes = ["https://www.googleapis.com/auth/cloud-platform"]
        if leaf == "" and query.get("recursive") == "true":
            info = {"aliases": ["default"], "email": self.email, "scopes": scopes}
            return self._reply(handler, 200, json.dumps(info), "application/json")
        if leaf == "email":
            return self._reply(handler, 200, self.email, "application/text")
        if leaf == "scopes":
            return self._reply(handler, 200, "\n".join(scopes) + "\n", "application/text")
        if leaf == "token":
            self.scopes_asked.append(query.get("scopes", ""))
            self.counted("token")
            lifetime = self.lifetime  # once: what is told is what is recorded
            token = self.google.issue(TOKEN_KIND, lifetime)
            answer = {"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}
            return self._reply(handler, 200, json.dumps(answer), "application/json")
        self._refuse(handler, 404, "not found")

    def _refuse(self, handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
        self.counted("refused")
        self._reply(handler, status, text, "text/html")

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, text: str, content_type: str) -> None:
        """As :meth:`Stub.reply`, with the ``Metadata-Flavor`` every real answer has."""
        data = text.encode()
        handler.send_response(status)
        handler.send_header(FLAVOR, GOOGLE)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

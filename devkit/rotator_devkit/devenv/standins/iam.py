"""A proxy in front of moto's IAM that records the access keys it hands out.

The controller's IAM endpoint, so that every key ``CreateAccessKey`` returns (secret key
included) goes into the :class:`~rotator_devkit.devenv.standins.aws.Keyring` it shares with the STS
proxy — which then checks ``GetCallerIdentity`` signatures made with those keys — and into
:attr:`issued`, for leak scans. ``DeleteAccessKey`` revokes a key, as in AWS. Requests signed
with a key it issued are verified; the management identities tests make up (moto accepts any
key) pass unchecked, but an unsigned request is refused.
"""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs

from rotator_devkit.devenv.standins import aws
from rotator_devkit.devenv.standins.httpstub import Stub


class IAMProxy(Stub):
    def __init__(self, upstream: str, keyring: aws.Keyring) -> None:
        super().__init__()
        self.upstream = upstream
        self.keyring = keyring

    def failure_body(self) -> bytes:
        return aws.aws_error("ServiceUnavailable", "Service is unavailable", "Receiver")

    def failure_content_type(self) -> str:
        return "text/xml"

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        action = form.get("Action", "")
        self.counted(action)
        refusal = aws.verify_received(
            self.keyring, handler, body, scheme=self.scheme, now=time.time()
        )
        if refusal is not None and refusal is not aws.UNKNOWN_KEY:
            self.counted(f"refused_{refusal.code}")
            self.reply(handler, refusal.status, refusal.body(), "text/xml")
            return
        status, answer, content_type = aws.forward(self.upstream, handler, body)
        if status == 200 and action == "CreateAccessKey":
            issued = aws.issued_in(answer)
            if issued is not None:
                key_id, secret, _ = issued
                user = f"arn:aws:iam::{aws.ACCOUNT}:user/{form.get('UserName', '')}"
                self.keyring.add(key_id, aws.Issued(secret, None, None, principal=user))
                self.remember(secret)
        elif status == 200 and action == "DeleteAccessKey":
            self.keyring.revoke(form.get("AccessKeyId", ""))
        self.reply(handler, status, answer, content_type)

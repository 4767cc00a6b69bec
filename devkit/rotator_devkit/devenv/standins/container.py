"""The container credentials endpoint of ECS and EKS Pod Identity, for the controller's own AWS
identity (``awsCredentials.controllerIdentity``).

botocore's default chain finds it through the variables the EKS Pod Identity webhook sets
(:meth:`ContainerCredentials.environment`): ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` — a loopback
URL here, as botocore allows plain http only to loopback and the link-local agent addresses —
and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``, whose content botocore sends, re-read on every
call, as the ``Authorization`` header. Like the EKS Pod Identity agent, this endpoint answers
only a ``GET`` whose ``Authorization`` equals its token, with the JSON botocore reads
(``AccessKeyId``, ``SecretAccessKey``, ``Token``, ``AccountId``, ``Expiration``): the keys of a
fresh session of ``role_arn`` that moto's STS issued, living ``lifetime`` seconds. They go into
the :class:`~rotator_devkit.devenv.standins.aws.Keyring` shared with the STS proxy — with the
role as their principal, so that the proxy checks the controller's ``AssumeRole`` signature and
the target role's trust — and into :attr:`issued` (with the token), for leak scans.

Counts: ``received`` (every request), ``refused`` (a wrong or missing token), ``served``;
``mode`` ``fail`` answers 503 and ``hang`` holds requests (the :class:`Stub` base).
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import boto3

from rotator_devkit.devenv.standins import aws
from rotator_devkit.devenv.standins.httpstub import Stub

PATH = "/v1/credentials"


class ContainerCredentials(Stub):
    def __init__(
        self,
        upstream: str,
        *,
        role_arn: str,
        keyring: aws.Keyring,
        lifetime: int = 60,
        token: str | None = None,
    ) -> None:
        super().__init__()
        self.role_arn = role_arn
        self.keyring = keyring
        self.lifetime = lifetime
        self.token = token or "pod-identity-" + secrets.token_urlsafe(32)
        self.remember(self.token)
        self.served_keys: list[str] = []
        """Access key ids served, in order."""
        self._sts = boto3.client(
            "sts",
            region_name="us-east-1",
            endpoint_url=upstream,
            aws_access_key_id="AKIAPODIDENTITYAGENT",
            aws_secret_access_key="moto-accepts-any-key",  # noqa: S106 - moto, on loopback
        )

    @property
    def credentials_url(self) -> str:
        return self.url + PATH

    def write_token(self, path: Path) -> Path:
        """Writes the token where ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` will say."""
        path.write_text(self.token)
        return path

    def environment(self, token_file: Path) -> dict[str, str]:
        """What EKS Pod Identity sets in a pod, pointing here."""
        return {
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": self.credentials_url,
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file),
        }

    def failure_content_type(self) -> str:
        return "application/json"

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        if method != "GET" or handler.path != PATH:
            self.reply(handler, 404, _error("NotFound", "no such path"), "application/json")
            return
        if handler.headers.get("Authorization") != self.token:
            self.counted("refused")
            self.reply(
                handler,
                401,
                _error("AccessDenied", "the Authorization header is not this pod's token"),
                "application/json",
            )
            return
        session = self._sts.assume_role(
            RoleArn=self.role_arn, RoleSessionName="eks-pod-identity", DurationSeconds=900
        )["Credentials"]
        expires_at = float(int(time.time() + self.lifetime))
        key_id, secret, token = (
            session["AccessKeyId"],
            session["SecretAccessKey"],
            session["SessionToken"],
        )
        self.keyring.add(key_id, aws.Issued(secret, token, expires_at, principal=self.role_arn))
        self.remember(secret, token)
        with self._lock:
            self.served_keys.append(key_id)
        answer = {
            "AccessKeyId": key_id,
            "SecretAccessKey": secret,
            "Token": token,
            "AccountId": self.role_arn.split(":")[4],
            "Expiration": datetime.fromtimestamp(expires_at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        self.counted("served")
        self.reply(handler, 200, json.dumps(answer).encode(), "application/json")


def _error(code: str, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}).encode()

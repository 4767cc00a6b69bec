"""A botocore error keeps its provider code on the engine's error (a connection failure its type
name), and IAM key deletion treats ``NoSuchEntity`` (the key is already gone) as done by that
code, not by searching the message."""

from __future__ import annotations

from typing import Any, NoReturn

import botocore.exceptions
import pytest

from rotator import errors
from rotator.observe import NoObserver
from rotator.providers.aws import iam
from rotator.providers.aws.clients import Clients


def client_error(code: str, status: int, message: str = "") -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "DeleteAccessKey")


def raising(exc: Exception) -> Any:
    def call() -> NoReturn:
        raise exc

    return call


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("NoSuchEntity", 404, errors.ProviderRejected),
        ("AccessDenied", 403, errors.ProviderRejected),
        ("Throttling", 400, errors.ProviderUnavailable),
        ("InternalError", 500, errors.ProviderUnavailable),
    ],
)
def test_a_mapped_client_error_carries_the_provider_code(
    code: str, status: int, kind: type[errors.CredentialError]
) -> None:
    clients = Clients(NoObserver())
    with pytest.raises(kind) as raised:
        clients.run("aws-iam", "DeleteAccessKey", raising(client_error(code, status)))
    assert raised.value.code == code
    assert str(raised.value) == f"aws-iam DeleteAccessKey failed: {code}"


def test_a_connection_failure_is_coded_by_its_type() -> None:
    clients = Clients(NoObserver())
    failure = botocore.exceptions.EndpointConnectionError(endpoint_url="https://sts.invalid")
    with pytest.raises(errors.ProviderUnavailable) as raised:
        clients.run("aws-sts", "Call", raising(failure))
    assert raised.value.code == "EndpointConnectionError"
    assert str(raised.value) == "aws-sts Call failed: EndpointConnectionError"


class FakeIAM:
    def __init__(self, error: botocore.exceptions.ClientError) -> None:
        self.error = error
        self.deleted: list[str] = []

    def delete_access_key(self, *, UserName: str, AccessKeyId: str) -> None:  # noqa: N803
        self.deleted.append(AccessKeyId)
        raise self.error


def test_deleting_a_key_that_is_already_gone_is_done() -> None:
    fake = FakeIAM(client_error("NoSuchEntity", 404))
    iam._delete(Clients(NoObserver()), fake, "rotated", "AKIAGONE")
    assert fake.deleted == ["AKIAGONE"]


def test_another_rejection_of_a_delete_is_raised_with_its_code() -> None:
    fake = FakeIAM(client_error("AccessDenied", 403))
    with pytest.raises(errors.ProviderRejected) as raised:
        iam._delete(Clients(NoObserver()), fake, "rotated", "AKIAKEPT")
    assert raised.value.code == "AccessDenied"

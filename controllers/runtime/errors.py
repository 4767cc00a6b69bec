"""Errors from the Kubernetes API, classified once at the client boundary.

::

    ApiError                      a request to the API server failed
    ├── TransientApiError         retry with backoff: the same request may succeed later
    │   ├── ConnectionFailed      no usable HTTP answer: refused, reset, timed out, or a body
    │   │                         over the client's byte bound (client.BodyLimits)
    │   ├── DeadlineExceeded      the reconcile's time budget ran out before the request
    │   ├── TooManyRequests       429
    │   ├── ServerError           5xx, and 408
    │   └── Conflict              409: written from a stale read; a retried reconcile re-reads
    │       └── AlreadyExists     409 with reason AlreadyExists
    └── (permanent for the request as sent: retrying the same request fails the same way)
        ├── BadRequest            400
        ├── Unauthorized          401
        ├── Forbidden             403
        ├── NotFound              404
        ├── Gone                  410: resourceVersion too old; re-list
        ├── Invalid               422: the object failed validation (message says why)
        └── InvalidName           refused before sending: a name unsafe as a path segment

Messages carry the API server's own message, which never contains a Secret's data.
"""

from __future__ import annotations


class ApiError(Exception):
    """A request to the API server failed."""

    transient = False

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", method: str = "", path: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        status = f" ({self.status} {self.reason})" if self.status else ""
        return f"{where}{self.args[0]}{status}"


class TransientApiError(ApiError):
    transient = True


class ConnectionFailed(TransientApiError):
    pass


class DeadlineExceeded(TransientApiError):
    pass


class TooManyRequests(TransientApiError):
    pass


class ServerError(TransientApiError):
    pass


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(TransientApiError):
    pass


class AlreadyExists(Conflict):
    pass


class Gone(ApiError):
    pass


class Invalid(ApiError):
    pass


class InvalidName(ApiError):
    """A name that is not one safe path segment (``..``, ``a/b``, empty): no request was sent."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: ServerError,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def from_status(
    status: int, *, reason: str, message: str, method: str = "", path: str = ""
) -> ApiError:
    """The most specific error for an HTTP status and a Kubernetes ``Status`` reason."""
    if status == 409 and reason == "AlreadyExists":
        cls: type[ApiError] = AlreadyExists
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    return cls(message, status=status, reason=reason, method=method, path=path)

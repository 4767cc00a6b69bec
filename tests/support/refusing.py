"""``refusing(T)``: a stand-in for a collaborator a test expects never to be used. Any use — an
attribute, a call — raises and names the stand-in, where ``cast(T, None)`` lied to mypy and
failed, if at all, with ``'NoneType' object has no attribute …`` somewhere else."""

from __future__ import annotations

from typing import Any, TypeVar, cast, overload

T = TypeVar("T")


class Refused(AssertionError):
    """A test used what it said it would not."""


class _Refusing:
    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        raise Refused(f"{self._what}.{name} used: this test expects {self._what} never to be")

    def __setattr__(self, name: str, value: Any) -> None:
        raise Refused(f"{self._what}.{name} set: this test expects {self._what} never to be")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise Refused(f"{self._what} called: this test expects it never to be")

    def __repr__(self) -> str:
        return f"refusing({self._what})"


@overload
def refusing(kind: type[T], what: str | None = None) -> T: ...
@overload
def refusing(kind: str, what: None = None) -> Any: ...
def refusing(kind: type[T] | str, what: str | None = None) -> T | Any:
    """A stand-in of type ``kind`` (a class, or only a name where the type is ``Any``) that
    refuses every use, naming itself (``what``, else the type's name)."""
    name = what or (kind if isinstance(kind, str) else kind.__name__)
    return cast(T, _Refusing(name))

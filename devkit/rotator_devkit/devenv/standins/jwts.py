"""Verifying RS256 JWTs against trusted issuers' JWKS, as the cloud token services do."""

from __future__ import annotations

from typing import Any

import jwt


class Trust:
    """Issuer → JWKS; verify() returns the claims or a reason for refusing."""

    def __init__(self) -> None:
        self.issuers: dict[str, dict[str, Any]] = {}

    def add(self, issuer: str, jwks: dict[str, Any]) -> None:
        self.issuers[issuer] = jwks

    def verify(self, token: str, *, audiences: set[str]) -> tuple[dict[str, Any] | None, str]:
        try:
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss", "")
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            return None, "not a JWT"
        jwks = self.issuers.get(issuer)
        if jwks is None:
            return None, "untrusted issuer"
        key = next((k for k in jwks["keys"] if k.get("kid") == kid), None)
        if key is None:
            return None, "unknown signing key"
        try:
            claims = jwt.decode(
                token,
                key=jwt.PyJWK(key).key,
                algorithms=["RS256"],
                audience=list(audiences),
                issuer=issuer,
            )
        except jwt.PyJWTError as exc:
            return None, type(exc).__name__
        return claims, ""

"""Where the in-cluster stand-ins listen and what they are told, from their environment.

The ports are fixed (a Service names them); the URLs the stand-ins hand out name
``<service>.<namespace>.svc``, which the cluster's DNS resolves in every Pod, and the TLS
certificate carries that name and its short forms. The controller sees the CA and the pod
identity token in files under :data:`MOUNT` (a Secret the tests create beside it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rotator_devkit.devenv.providers import STAND_INS, Placement

NAMESPACE = "rotator-standins"
SERVICE = "standins"
PUBLIC_HOST = f"{SERVICE}.{NAMESPACE}.svc"
ADMIN = "admin"
PORTS: dict[str, int] = {
    ADMIN: 8080,
    "moto": 5000,
    "sts": 5001,
    "iam": 5002,
    "oidc": 5003,
    "gcp": 5004,
    "azure": 5005,
    "pod-identity": 5006,
    "imds": 5007,
    "gce-metadata": 5008,
    "openai": 5009,
    "bedrock": 5010,
    "azure-openai": 5011,
    "vertex-ai": 5012,
}
"""Stand-in → port; the Service's port names are these names."""
TLS = frozenset({"oidc", "azure", "pod-identity"})
"""Served over HTTPS: the shipped controller sends OIDC client secrets only over TLS, MSAL
insists on https, and botocore fetches container credentials over plain http only from
loopback or the agents' link-local addresses."""

MOUNT = "/var/run/rotator-standins"
"""Where the controller's container sees the stand-ins' files (:data:`CA_KEY`,
:data:`TOKEN_KEY`)."""
CA_KEY = "ca.crt"
TOKEN_KEY = "pod-identity-token"  # noqa: S105 - a file name
SAMPLES = "/opt/rotator-devkit/samples"
"""config/samples, as the dev-kit image holds them."""

ENV_PREFIX = "ROTATOR_STANDINS_"


@dataclass(frozen=True)
class Settings:
    lifetime: int = 60
    """Seconds the credentials the stand-ins mint live."""
    bind: str = "0.0.0.0"  # noqa: S104 - a Pod's stand-ins serve its Service
    public_host: str = PUBLIC_HOST
    port_offset: int = 0
    """Added to every port (a host process beside others, in development)."""
    samples: Path | None = Path(SAMPLES)
    """The samples to register at start; None: none."""
    state: Path = Path("/tmp/rotator-standins")  # noqa: S108 - the Pod's emptyDir
    """Where the TLS files go."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """``ROTATOR_STANDINS_LIFETIME``, ``_BIND``, ``_PUBLIC_HOST``, ``_PORT_OFFSET``,
        ``_SAMPLES`` (empty: none) and ``_STATE``; the defaults are the Pod's. ValueError names
        a value that is not usable."""
        default = cls()

        def get(name: str) -> str | None:
            return environ.get(ENV_PREFIX + name)

        samples = get("SAMPLES")
        return cls(
            lifetime=_positive(get("LIFETIME"), "LIFETIME", default.lifetime),
            bind=get("BIND") or default.bind,
            public_host=get("PUBLIC_HOST") or default.public_host,
            port_offset=_positive(get("PORT_OFFSET"), "PORT_OFFSET", 0, zero=True),
            samples=default.samples if samples is None else (Path(samples) if samples else None),
            state=Path(get("STATE") or default.state),
        )

    def port(self, name: str) -> int:
        return PORTS[name] + self.port_offset

    def placement(self) -> Placement:
        return Placement(
            bind=self.bind,
            public_host=self.public_host,
            ports={name: self.port(name) for name in STAND_INS},
            tls=TLS,
            dns_names=short_names(self.public_host),
        )


def short_names(host: str) -> tuple[str, ...]:
    """The names a Service's DNS answers besides ``<svc>.<ns>.svc``: ``<svc>.<ns>``, ``<svc>``
    (in its namespace) and ``<svc>.<ns>.svc.cluster.local``; none for another kind of host."""
    parts = host.split(".")
    if len(parts) != 3 or parts[2] != "svc":
        return ()
    service, namespace = parts[0], parts[1]
    return (f"{service}.{namespace}.svc.cluster.local", f"{service}.{namespace}", service)


def _positive(value: str | None, name: str, default: int, *, zero: bool = False) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name}={value!r} is not a whole number") from None
    if number < 0 or (number == 0 and not zero):
        raise ValueError(f"{ENV_PREFIX}{name}={value!r} must be {'≥' if zero else '>'} 0")
    return number

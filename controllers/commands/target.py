"""Which policy a command is about and how to reach it, read the way kubectl reads them.

The object: ``bsp/NAME``, ``backendsecuritypolicy/NAME``, ``backendsecuritypolicies/NAME`` (also
``.rotator.dev``-qualified), or the type and the name as two words (``bsp NAME``). The server:
restconfig's order (``--kubeconfig``, ``$KUBECONFIG``, in-cluster, ``~/.kube/config``). The
namespace: ``-n``, else the current context's namespace in that kubeconfig, else the pod's
namespace in a cluster, else ``default`` — as kubectl picks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from controllers.commands.errors import UsageError
from controllers.reconcilers import api
from controllers.runtime import apiclient, kubelib, restconfig
from controllers.runtime import client as clients

SHORT_NAME = "bsp"  # the CRD's shortNames (config/crd/bases)
_KIND = api.POLICIES.kind.lower()
POLICY_TYPES = frozenset(
    {SHORT_NAME, _KIND, api.POLICIES.plural}
    | {f"{n}.{api.GROUP}" for n in (_KIND, api.POLICIES.plural)}
    | {f"{n}.{api.VERSION}.{api.GROUP}" for n in (_KIND, api.POLICIES.plural)}
)
"""How the policy type may be written, as ``kubectl get`` accepts it."""
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Target:
    """A policy and the client to reach it with."""

    client: apiclient.CommandClient
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{_KIND}/{self.name} in namespace {self.namespace}"


def policy_name(words: Sequence[str]) -> str:
    """The policy's name in ``TYPE/NAME`` or ``TYPE NAME``; :class:`UsageError` otherwise."""
    expected = f"expected {SHORT_NAME}/NAME ({_KIND}/NAME, {api.POLICIES.plural}/NAME)"
    if len(words) == 1 and "/" in words[0]:
        kind, _, name = words[0].partition("/")
    elif len(words) == 2 and "/" not in words[0]:
        kind, name = words
    else:
        raise UsageError(f"{expected}, got {' '.join(words)!r}")
    if kind.lower() not in POLICY_TYPES:
        raise UsageError(
            f"{kind!r} is not a BackendSecurityPolicy: rotator status and renew are about "
            f"policies; {expected}"
        )
    if not name or "/" in name:
        raise UsageError(f"{expected}, got {' '.join(words)!r}")
    return name


def connect(
    words: Sequence[str],
    *,
    kubeconfig: str | None,
    namespace: str | None,
    environ: Mapping[str, str] = os.environ,
    in_cluster_dir: str = restconfig.IN_CLUSTER_DIR,
) -> Target:
    """The policy named on the command line, with a client for its API server; raises
    :class:`UsageError` or :class:`~controllers.runtime.restconfig.ConfigNotFound`."""
    name = policy_name(words)
    api_client = restconfig.load(kubeconfig, in_cluster_dir=in_cluster_dir, environ=environ)
    return Target(
        clients.Client(api_client),
        namespace or default_namespace(kubeconfig, environ=environ, in_cluster_dir=in_cluster_dir),
        name,
    )


def default_namespace(
    kubeconfig: str | None,
    *,
    environ: Mapping[str, str] = os.environ,
    in_cluster_dir: str = restconfig.IN_CLUSTER_DIR,
) -> str:
    """The namespace kubectl would use without ``-n``, from the source restconfig loads."""
    explicit = kubeconfig or environ.get("KUBECONFIG")
    if explicit:
        return context_namespace(explicit)
    if restconfig.in_cluster_available(in_cluster_dir, environ):
        return restconfig.in_cluster_namespace(in_cluster_dir) or DEFAULT_NAMESPACE
    home = Path.home() / ".kube" / "config"
    return context_namespace(str(home)) if home.is_file() else DEFAULT_NAMESPACE


def context_namespace(kubeconfig: str) -> str:
    """The current context's namespace in ``kubeconfig`` (``os.pathsep``-separated files are
    merged, as kubectl does), or ``default``."""
    _, current = kubelib.kube_config().list_kube_config_contexts(config_file=kubeconfig)
    context = (current or {}).get("context") or {}
    return str(context.get("namespace") or DEFAULT_NAMESPACE)

"""Where the API server is and how to authenticate: controller-runtime's ``GetConfig`` order.

1. an explicit kubeconfig path (the ``--kubeconfig`` flag);
2. the ``KUBECONFIG`` environment variable;
3. the in-cluster service account (``KUBERNETES_SERVICE_HOST`` and the token file);
4. ``~/.kube/config``.

None of them → :class:`ConfigNotFound`, with a message that says what was tried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from controllers.runtime import kubelib

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ConfigNotFound(Exception):
    """No way to reach a Kubernetes API server was found."""


def load(
    kubeconfig: str | None = None,
    *,
    in_cluster_dir: str = IN_CLUSTER_DIR,
    environ: Mapping[str, str] = os.environ,
    pool_size: int = 32,
) -> kubelib.Connection:
    """A connection for the first source that exists (see the module docstring)."""
    configuration = kubelib.Configuration()
    configuration.connection_pool_maxsize = pool_size
    explicit = kubeconfig or environ.get("KUBECONFIG")
    if explicit:
        paths = [p for p in explicit.split(os.pathsep) if p]
        missing = [p for p in paths if not Path(p).is_file()]
        if missing:
            raise ConfigNotFound(f"kubeconfig file not found: {', '.join(missing)}")
        kubelib.kube_config().load_kube_config(
            config_file=explicit, client_configuration=configuration
        )
    elif in_cluster_available(in_cluster_dir, environ):
        loader = kubelib.InClusterConfigLoader(
            token_filename=str(Path(in_cluster_dir) / "token"),
            cert_filename=str(Path(in_cluster_dir) / "ca.crt"),
            environ=environ,
        )
        loader.load_and_set(configuration)
    elif (home := Path.home() / ".kube" / "config").is_file():
        kubelib.kube_config().load_kube_config(
            config_file=str(home), client_configuration=configuration
        )
    else:
        raise ConfigNotFound(
            "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a cluster "
            f"(KUBERNETES_SERVICE_HOST and {in_cluster_dir}/token), or create ~/.kube/config"
        )
    configuration.connection_pool_maxsize = pool_size
    return kubelib.connection(configuration)


def in_cluster_available(in_cluster_dir: str, environ: Mapping[str, str] = os.environ) -> bool:
    return (
        bool(environ.get("KUBERNETES_SERVICE_HOST")) and (Path(in_cluster_dir) / "token").is_file()
    )


def in_cluster_namespace(in_cluster_dir: str = IN_CLUSTER_DIR) -> str | None:
    """The namespace this pod runs in, when running in a cluster."""
    try:
        return (Path(in_cluster_dir) / "namespace").read_text().strip() or None
    except OSError:
        return None

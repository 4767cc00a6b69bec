"""The parts of the ``kubernetes`` package rotator uses, imported without the rest of it.

rotator takes from the package where the API server is and how to authenticate (kubeconfig,
with its exec plugins, auth providers and token files; the in-cluster service account) and the
connection pool built from that (TLS, client certificates, proxies): its
``client/configuration.py``, ``client/rest.py`` and ``config/``. It never uses the generated API
classes and models, since :mod:`controllers.runtime.client` speaks plain JSON. But the package's
``__init__`` files import everything: ``import kubernetes.client.configuration`` runs
``kubernetes/__init__.py``, which imports every API class and ~700 pydantic models. That is
43 MiB over a bare interpreter, 11 MiB more than the modules above with what they import. Measured
with ``python -c "import kubernetes.client"`` against this module, from the ``VmRSS`` of
``/proc/self/status``. 11 MiB is 7 % of the 150 MiB goal for a 10,000-chain controller
(issue 38).

How: the modules above import each other by absolute name (``kubernetes.client.exceptions``,
``kubernetes.utils.retry``…). So they are imported while empty stand-in packages take the
places of ``kubernetes``, ``kubernetes.client``, ``kubernetes.config`` and ``kubernetes.utils``
in ``sys.modules``. A stand-in has the real directory as its ``__path__`` and none of the
real package's ``__init__``. Then every ``kubernetes`` entry they added is taken out of
``sys.modules`` again. This module keeps its own references, and a later ``import kubernetes``
(a test, a debugger) gets the whole package as usual, with classes of its own. Nothing here
checks a class by identity: a ``Configuration`` of either import works with both, since it is
only read by attribute.

``kube_config`` imports ``ApiClient`` from ``kubernetes.client`` for ``new_client_from_config``,
which rotator never calls, and to refresh an expired token of the ``oidc`` auth provider (its
discovery request). The stand-in gives it :func:`_api_client`, which imports the whole package
then, and only then: a kubeconfig whose OIDC token needs a refresh pays the 11 MiB.

If the whole package was imported before this module (``kubernetes.client`` in
``sys.modules``), its own modules are used. ``kube_config`` is imported on first use
(:func:`kube_config`), under the stand-ins again, beside the modules imported first.
tests/unit/test_kubelib.py checks, in a fresh interpreter, that no model is
imported and that the package imported afterwards is whole. The ``kubernetes`` version is pinned
to one major release in pyproject.toml, and a change of this layout fails that test.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PACKAGE = "kubernetes"
_STAND_INS = ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils")
_PARTS = (
    "kubernetes.client.configuration",
    "kubernetes.client.rest",
    "kubernetes.config.config_exception",
    "kubernetes.config.incluster_config",
)
_KUBE_CONFIG = "kubernetes.config.kube_config"
_lock = threading.Lock()
_loaded: dict[str, types.ModuleType] = {}
"""Every ``kubernetes`` module imported under the stand-ins, by name: put back in place while
``kube_config`` is imported later, so that it shares them (one ``ConfigException``)."""


def _api_client(*args: Any, **kwargs: Any) -> Any:
    """What ``kube_config`` sees as ``kubernetes.client.ApiClient``: the real one, from the
    whole package, imported on this first use (see the module docstring)."""
    return importlib.import_module("kubernetes.client").ApiClient(*args, **kwargs)


def _import(names: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """The modules ``names``, imported under the stand-ins (see the module docstring)."""
    with _lock:  # imports are serialized anyway; this keeps two callers' stand-ins apart
        if not _loaded and "kubernetes.client" in sys.modules:  # whole before rotator came
            return {name: importlib.import_module(name) for name in names}
        if all(name in _loaded for name in names):
            return {name: _loaded[name] for name in names}
        spec = importlib.util.find_spec(_PACKAGE)  # finds; runs no __init__
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("the kubernetes package is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        before = {
            k: v
            for k, v in list(sys.modules.items())
            if k == _PACKAGE or k.startswith("kubernetes.")
        }
        try:
            for name in before:  # the whole package, imported since: not seen meanwhile
                del sys.modules[name]
            for name in _STAND_INS:
                stand_in = types.ModuleType(name)
                stand_in.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
                stand_in.__package__ = name
                sys.modules[name] = stand_in
            sys.modules.update(_loaded)
            configuration = importlib.import_module("kubernetes.client.configuration")
            client_stand_in = sys.modules["kubernetes.client"]
            client_stand_in.Configuration = configuration.Configuration  # type: ignore[attr-defined]
            client_stand_in.ApiClient = _api_client  # type: ignore[attr-defined]
            return {name: importlib.import_module(name) for name in names}
        finally:
            added = [k for k in list(sys.modules) if k == _PACKAGE or k.startswith("kubernetes.")]
            for name in added:
                if name not in _STAND_INS:
                    _loaded.setdefault(name, sys.modules[name])
                del sys.modules[name]
            sys.modules.update(before)  # the whole package, as it was, when it was imported


_modules = _import(_PARTS)
rest = _modules["kubernetes.client.rest"]
Configuration: Any = _modules["kubernetes.client.configuration"].Configuration
ConfigException: type[Exception] = _modules["kubernetes.config.config_exception"].ConfigException
InClusterConfigLoader: Any = _modules["kubernetes.config.incluster_config"].InClusterConfigLoader


def kube_config() -> types.ModuleType:
    """``kubernetes.config.kube_config``, imported on first use: only a kubeconfig file needs
    it, and it imports oauthlib, requests-oauthlib and google-auth (for its auth providers):
    2.7 MiB of RSS as deployed (``import controllers.cli`` with and without it) that a Pod,
    configured in-cluster, never uses."""
    return _import((_KUBE_CONFIG,))[_KUBE_CONFIG]


USER_AGENT = f"OpenAPI-Generator/{importlib.metadata.version(_PACKAGE)}/python"
"""The ``User-Agent`` the package's ``ApiClient`` sends, which rotator sent while it used one:
kept, so audit logs and anything that matches on them read the same."""


@dataclass(frozen=True)
class Connection:
    """What :class:`controllers.runtime.client.Client` sends on. It holds what it used of an
    ``ApiClient``, under the same names, so an ``ApiClient`` serves too (tests build one)."""

    configuration: Any
    rest_client: Any
    default_headers: dict[str, str] = field(default_factory=lambda: {"User-Agent": USER_AGENT})


def connection(configuration: Any) -> Connection:
    """A connection pool for ``configuration``, as ``ApiClient(configuration)`` builds it."""
    return Connection(configuration, rest.RESTClientObject(configuration))

"""controllers.runtime.kubelib: the kubernetes package's configuration, transport and config
loaders, without its generated models. Each check runs in a fresh interpreter, because what it
checks is what an import leaves in ``sys.modules``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from controllers.runtime import kubelib, restconfig

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_controller_imports_no_model_and_leaves_no_kubernetes_module() -> None:
    """Mutation caught: importing ``kubernetes.config`` or ``kubernetes.client`` directly (its
    ``__init__`` imports ~700 models, 11 MiB)."""
    out = _run(
        """
        import sys
        import controllers.cli
        from controllers.runtime import kubelib
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes", "pydantic")))
        print(kubelib.Configuration.__module__, kubelib.kube_config().__name__)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes", "pydantic")))
        """
    )
    assert out.splitlines() == [
        "[]",
        "kubernetes.client.configuration kubernetes.config.kube_config",
        "[]",
    ]


def test_a_pod_imports_no_kubeconfig_loader_nor_what_it_needs() -> None:
    """In-cluster, nothing loads a kubeconfig file: its auth providers' oauthlib,
    requests-oauthlib and google-auth stay out (2.7 MiB as deployed; requests is rotator's own,
    for OIDC). Mutation caught: importing ``kube_config`` with the other parts."""
    out = _run(
        """
        import sys
        import controllers.cli
        tops = {m.split(".")[0] for m in sys.modules}
        print(sorted(tops & {"oauthlib", "requests_oauthlib", "google"}))
        """
    )
    assert out.strip() == "[]"


def test_kube_config_loaded_late_shares_the_modules_loaded_first() -> None:
    """One ConfigException, whichever part raises it, even when the whole package was imported
    in between (a test). Mutation caught: importing kube_config from the whole package then."""
    out = _run(
        """
        from controllers.runtime import kubelib
        import kubernetes.client
        loaded = kubelib.kube_config()
        print(loaded.ConfigException is kubelib.ConfigException)
        print(loaded.Configuration is kubelib.Configuration)
        print(kubelib.kube_config() is loaded)
        """
    )
    assert out.split() == ["True", "True", "True"]


def test_the_package_imported_after_it_is_whole() -> None:
    """A test or a debugger that imports kubernetes after rotator gets the real package, not
    the stand-ins. Mutation caught: leaving the stand-ins in ``sys.modules``."""
    out = _run(
        """
        from controllers.runtime import kubelib
        import kubernetes
        from kubernetes import client, config
        print(client.CoreV1Api.__name__, client.ApiClient.__module__, callable(config.load_config))
        print(client.Configuration is kubelib.Configuration)
        """
    )
    assert out.splitlines() == ["CoreV1Api kubernetes.client.api_client True", "False"]


def test_a_package_imported_before_it_is_the_one_used() -> None:
    out = _run(
        """
        import kubernetes.client
        from controllers.runtime import kubelib
        print(kubelib.Configuration is kubernetes.client.Configuration)
        """
    )
    assert out.strip() == "True"


def test_a_kubeconfig_loads_into_a_connection_as_apiclient_would(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        textwrap.dedent(
            """
            apiVersion: v1
            kind: Config
            clusters:
            - name: c
              cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
            users:
            - name: u
              user: {token: not-a-real-token}
            contexts:
            - name: x
              context: {cluster: c, user: u, namespace: team}
            current-context: x
            """
        )
    )
    connection = restconfig.load(str(kubeconfig), environ={}, pool_size=7)
    assert connection.configuration.host == "https://127.0.0.1:6443"
    assert connection.configuration.connection_pool_maxsize == 7
    token = connection.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    assert token == "Bearer not-a-real-token"
    assert connection.default_headers == {"User-Agent": kubelib.USER_AGENT}
    assert connection.rest_client.pool_manager.connection_pool_kw["maxsize"] == 7


def test_a_broken_kubeconfig_raises_the_exception_the_cli_catches(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: missing\n")
    with pytest.raises(kubelib.ConfigException):
        restconfig.load(str(kubeconfig), environ={})


def test_the_user_agent_is_the_one_apiclient_sends() -> None:
    assert ApiClient().default_headers["User-Agent"] == kubelib.USER_AGENT


def test_kube_config_builds_a_real_apiclient_when_it_needs_one() -> None:
    """It does to refresh an expired OIDC token (its discovery request): the whole package is
    imported then, not before. Mutation caught: a stand-in that refuses (an expired OIDC token
    in a kubeconfig then failed to load)."""
    out = _run(
        """
        import sys
        from controllers.runtime import kubelib
        loaded = kubelib.kube_config()
        print("kubernetes.client.api_client" in sys.modules)
        client = loaded.ApiClient(configuration=kubelib.Configuration())
        print(type(client).__module__, hasattr(client.rest_client, "pool_manager"))
        """
    )
    assert out.splitlines() == ["False", "kubernetes.client.api_client True"]


def test_a_late_kube_config_leaves_the_whole_package_as_it_was() -> None:
    """A test imports the whole package after rotator, then a kubeconfig is loaded: every
    module of the package is still there, the very same. Mutation caught: restoring only the
    entries seen at the end (one load dropped 21 of 36)."""
    out = _run(
        """
        import sys
        from controllers.runtime import kubelib
        import kubernetes.client
        before = {k: id(v) for k, v in sys.modules.items() if k.startswith("kubernetes")}
        kubelib.kube_config()
        after = {k: id(v) for k, v in sys.modules.items() if k.startswith("kubernetes")}
        print(before == after, len(before) > 30)
        """
    )
    assert out.split() == ["True", "True"]

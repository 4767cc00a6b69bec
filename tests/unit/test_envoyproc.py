"""A real Envoy, as the Envoy route format runs it: started in the folder a Secret is mounted
at, all paths relative. First that the harness itself works (ready, a listener's port, stats,
a clean stop); then the property the whole format rests on: a credential file swapped in by
the kubelet's ``..data`` rename reaches requests through ``credential_injector`` with no
restart (the PID never changes)."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.support import envoyproc, required
from tests.support.atomicwriter import AtomicWriter
from tests.support.envoyproc import EnvoyExited, EnvoyProcess, require_envoy
from tests.support.polling import wait_for

DIRECT = {
    "static_resources": {
        "listeners": [
            {
                "name": "direct",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                "filter_chains": [
                    {
                        "filters": [
                            {
                                "name": "envoy.filters.network.http_connection_manager",
                                "typed_config": {
                                    "@type": "type.googleapis.com/envoy.extensions.filters."
                                    "network.http_connection_manager.v3.HttpConnectionManager",
                                    "stat_prefix": "direct",
                                    "route_config": {
                                        "virtual_hosts": [
                                            {
                                                "name": "all",
                                                "domains": ["*"],
                                                "routes": [
                                                    {
                                                        "match": {"prefix": "/"},
                                                        "direct_response": {
                                                            "status": 200,
                                                            "body": {"inline_string": "hello"},
                                                        },
                                                    }
                                                ],
                                            }
                                        ]
                                    },
                                    "http_filters": [
                                        {
                                            "name": "envoy.filters.http.router",
                                            "typed_config": {
                                                "@type": "type.googleapis.com/envoy.extensions."
                                                "filters.http.router.v3.Router"
                                            },
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                ],
            }
        ]
    }
}


@pytest.fixture(scope="module")
def envoy_binary() -> Path:
    return require_envoy()


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_envoy_starts_in_its_folder_becomes_ready_reports_stats_and_stops(
    tmp_path: Path, envoy_binary: Path
) -> None:
    folder = tmp_path / "route-config"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(DIRECT))
    envoy = EnvoyProcess(folder, log=tmp_path / "envoy.log", binary=envoy_binary)
    with envoy:
        envoy.wait_ready(deadline_s=30)
        assert envoy.alive()
        port = envoy.listener_port("direct")
        assert get(f"http://127.0.0.1:{port}/anything") == (200, "hello")

        def counted() -> dict[str, int] | None:
            found = envoy.stats("http.direct.")
            return found if found.get("http.direct.downstream_rq_2xx") else None

        stats = wait_for(counted, timeout=10, what="the request counted")
        assert stats["http.direct.downstream_rq_2xx"] == 1
        assert all(name.startswith("http.direct.") for name in stats)
        pid = envoy.pid
    assert not envoy.alive()
    assert envoy.stop() == 0  # SIGTERM: a clean exit, not a kill
    assert envoy.pid == pid
    assert "starting main dispatch loop" in (tmp_path / "envoy.log").read_text()


def test_a_rejected_bootstrap_fails_wait_ready_at_once_with_envoys_reason(
    tmp_path: Path, envoy_binary: Path
) -> None:
    (tmp_path / "config.yaml").write_text("static_resources: {listeners: [{name: 1}]}\n")
    envoy = EnvoyProcess(tmp_path, log=tmp_path / "envoy.log", binary=envoy_binary)
    started = time.monotonic()
    with envoy, pytest.raises(EnvoyExited, match="Envoy exited with status 1"):
        envoy.wait_ready(deadline_s=60)
    assert time.monotonic() - started < 30  # at its exit, not at the deadline
    assert not envoy.alive()


# --- the reload ------------------------------------------------------------------------------


class Echo(ThreadingHTTPServer):
    """A loopback upstream that answers every request with the Authorization header it got."""

    daemon_threads = True

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.dumps({"authorization": self.headers.get("Authorization")}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.do_POST()

            def log_message(self, format: str, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def injecting_bootstrap(upstream_port: int) -> dict[str, object]:
    """A listener routing everything to one cluster whose upstream filter injects the
    generic secret ``a`` as ``Authorization``, the secret read from ``cred-a.yaml`` (SDS over
    a file) in the working directory, watched through ``.`` for the ``..data`` swap."""
    bootstrap = json.loads(json.dumps(DIRECT))
    # file-based SDS refuses to start without a node id and cluster (Envoy 1.40: "node 'id'
    # and 'cluster' are required"), so a bootstrap with credential files must name its node
    bootstrap["node"] = {"id": "route-config-test", "cluster": "gateway"}
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"] = [
        {"match": {"prefix": "/"}, "route": {"cluster": "upstream"}}
    ]
    bootstrap["static_resources"]["clusters"] = [
        {
            "name": "upstream",
            "type": "STATIC",
            "connect_timeout": "2s",
            "load_assignment": {
                "cluster_name": "upstream",
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {
                                "endpoint": {
                                    "address": {
                                        "socket_address": {
                                            "address": "127.0.0.1",
                                            "port_value": upstream_port,
                                        }
                                    }
                                }
                            }
                        ]
                    }
                ],
            },
            "typed_extension_protocol_options": {
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                    "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3."
                    "HttpProtocolOptions",
                    "explicit_http_config": {"http_protocol_options": {}},
                    "http_filters": [
                        {
                            "name": "envoy.filters.http.credential_injector",
                            "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http."
                                "credential_injector.v3.CredentialInjector",
                                "overwrite": True,
                                "credential": {
                                    "name": "envoy.http.injected_credentials.generic",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.http."
                                        "injected_credentials.generic.v3.Generic",
                                        "credential": {
                                            "name": "a",
                                            "sds_config": {
                                                "path_config_source": {
                                                    "path": "cred-a.yaml",
                                                    "watched_directory": {"path": "."},
                                                }
                                            },
                                        },
                                        "header": "Authorization",
                                    },
                                },
                            },
                        },
                        {
                            "name": "envoy.filters.http.upstream_codec",
                            "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http."
                                "upstream_codec.v3.UpstreamCodec"
                            },
                        },
                    ],
                }
            },
        }
    ]
    return bootstrap  # type: ignore[no-any-return]


def secret_file(value: str) -> bytes:
    return yaml.safe_dump(
        {
            "resources": [
                {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
                    "name": "a",
                    "generic_secret": {"secret": {"inline_string": value}},
                }
            ]
        }
    ).encode()


def test_a_credential_swapped_in_by_the_kubelets_rename_reaches_requests_without_a_restart(
    tmp_path: Path, envoy_binary: Path, echo: Echo
) -> None:
    folder = tmp_path / "route-config"
    writer = AtomicWriter(folder)
    config = yaml.safe_dump(injecting_bootstrap(echo.server_address[1])).encode()
    writer.write({"config.yaml": config, "cred-a.yaml": secret_file("Bearer key-v1")})
    envoy = EnvoyProcess(folder, log=tmp_path / "envoy.log", binary=envoy_binary)
    with envoy:
        envoy.wait_ready(deadline_s=30)
        pid = envoy.pid
        url = f"http://127.0.0.1:{envoy.listener_port('direct')}/v1/chat/completions"

        def injected() -> str | None:
            status, body = get(url)
            assert status == 200, (status, body)
            value = json.loads(body)["authorization"]
            return value if isinstance(value, str) else None

        assert injected() == "Bearer key-v1"
        updates = envoy.stats("sds.a.")
        assert writer.write({"config.yaml": config, "cred-a.yaml": secret_file("Bearer key-v2")})
        wait_for(
            lambda: injected() == "Bearer key-v2",
            timeout=30,
            what="requests to carry the swapped-in credential",
        )
        # once switched, every request carries the new one (no worker still on the old)
        assert {injected() for _ in range(20)} == {"Bearer key-v2"}
        assert envoy.alive()
        assert envoy.pid == pid
        after = envoy.stats("sds.a.")
        assert after.get("sds.a.update_success", 0) > updates.get("sds.a.update_success", 0), (
            updates,
            after,
        )
    assert envoy.stop() == 0


def test_a_missing_envoy_skips_by_hand_and_fails_where_the_setup_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.delenv(required.COMPLETE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="envoy is not installed"):
        require_envoy()
    monkeypatch.setenv(required.COMPLETE, "1")
    with pytest.raises(pytest.fail.Exception, match="envoy is not installed"):
        require_envoy()
    (tmp_path / "envoy").write_text("#!/bin/sh\n")  # beside the interpreter, as in a venv
    assert envoyproc.envoy_binary() == tmp_path / "envoy"

"""The metrics flags as kubebuilder's main.go reads them: secure by default, Go-style booleans,
plain HTTP only when asked for (and for `rotator dev`, on loopback)."""

from __future__ import annotations

import pytest

from controllers import cli


@pytest.mark.parametrize(
    ("argv", "secure"),
    [
        ([], True),
        (["--metrics-secure"], True),
        (["--metrics-secure=true"], True),
        (["--metrics-secure=false"], False),
        (["--metrics-secure", "false"], False),
        (["--metrics-secure=0"], False),
        (["--metrics-secure=false", "--metrics-secure"], True),  # the last one wins, as in Go
    ],
)
def test_metrics_are_secure_unless_turned_off(argv: list[str], secure: bool) -> None:
    args = cli.build_parser().parse_args(["run", *argv])
    assert args.metrics_secure is secure
    assert args.metrics_bind_address == ":8443"
    assert args.metrics_cert_dir == ""


def test_a_value_that_is_not_a_boolean_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["run", "--metrics-secure=maybe"])
    assert exited.value.code == 2


def test_rotator_dev_serves_plain_metrics_on_loopback() -> None:
    args = cli.build_parser().parse_args(["dev"])
    assert (args.metrics_secure, args.metrics_bind_address) == (False, "127.0.0.1:8080")


def test_a_cert_dir_without_its_files_is_a_usage_error(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    args = cli.build_parser().parse_args(["run", "--metrics-cert-dir", str(tmp_path)])
    code = cli._run(args, kubeconfig=str(kubeconfig))  # before anything starts
    assert code == cli.EXIT_USAGE
    assert "needs tls.crt and tls.key" in capsys.readouterr().err

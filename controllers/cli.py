"""The ``rotator`` command: the composition root, where every part is built and wired once.

``rotator run``      the controller manager, against a kubeconfig or in-cluster
``rotator dev``      a local control plane, moto and the stand-ins, the samples, and the
                     controller against them in the foreground, with a live table of policies
``rotator standins`` a running ``rotator dev``'s stand-ins: accept or retire an API key, make a
                     provider fail or heal (what an operator's provider does)
``rotator status``   one policy: conditions, credential times, derived Secret, routes, events
``rotator renew``    ask for a new credential now (``--wait``: until it is served)
``rotator version``  the version

``kubectl rotator …`` (the ``kubectl-rotator`` entry point) is the same command line.

Exit codes: 0 after a clean stop, 1 on a runtime failure (e.g. leadership lost), 2 on bad usage
or missing configuration, 130 when ``rotator dev`` is interrupted while starting.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

import structlog

import rotator
from controllers import logs
from controllers.commands import entry as commands
from controllers.reconcilers import api, credentialsources, setup
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import kubelib, leaderelection, manager, restconfig, shards, tlsserving
from controllers.runtime import metrics as metric_families
from controllers.runtime.informer import InformerOptions
from rotator.providers import azure_endpoints
from rotator.providers.gcp.endpoints import Endpoints as GCPEndpoints

log = structlog.get_logger("rotator")

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # rotator dev stopped before it was up (the shell's code for SIGINT)
LEADER_ELECTION_ID = leaderelection.DEFAULT_ID


def _add_run_flags(p: argparse.ArgumentParser, *, with_kubeconfig: bool = True) -> None:
    p.add_argument(
        "--in-cluster-dir",
        default=os.environ.get("ROTATOR_IN_CLUSTER_DIR", restconfig.IN_CLUSTER_DIR),
        help="folder of the in-cluster token, ca.crt and namespace files "
        f"(env ROTATOR_IN_CLUSTER_DIR; default {restconfig.IN_CLUSTER_DIR})",
    )
    if with_kubeconfig:
        p.add_argument(
            "--kubeconfig",
            help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
        )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        dest="namespaces",
        help="namespace to watch; repeat for several (default: all)",
    )
    p.add_argument(
        "--metrics-bind-address",
        default=":8443",
        help='metrics address; "0" disables (default :8443; :8080 is usual with '
        "--metrics-secure=false)",
    )
    p.add_argument(
        "--metrics-secure",
        type=_flag_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="serve metrics over HTTPS to bearer tokens the API server authenticates and "
        "authorizes for get /metrics (TokenReview, SubjectAccessReview); false: plain HTTP to "
        "anyone, for local use (default true)",
    )
    p.add_argument(
        "--metrics-cert-dir",
        default="",
        help="folder with tls.crt and tls.key for the metrics endpoint, re-read when they change "
        "(default: a self-signed certificate made at start)",
    )
    p.add_argument(
        "--health-probe-bind-address",
        default=":8081",
        help='probe address; "0" disables (default :8081)',
    )
    p.add_argument(
        "--leader-elect", action="store_true", help="campaign for a Lease before reconciling"
    )
    p.add_argument(
        "--leader-election-namespace",
        default="",
        help="namespace of the Lease (default: the pod's)",
    )
    p.add_argument(
        "--leader-election-id",
        default=LEADER_ELECTION_ID,
        help=f"name of the Lease (default {LEADER_ELECTION_ID})",
    )
    p.add_argument(
        "--leader-election-lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="seconds a candidate waits after the Lease's last change before taking it over "
        "(default 15)",
    )
    p.add_argument(
        "--leader-election-renew-deadline",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds the holder keeps trying to renew before it gives the work up (default 10)",
    )
    p.add_argument(
        "--leader-election-retry-period",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between attempts to acquire or renew (default 2)",
    )
    p.add_argument(
        "--workers", type=int, default=4, help="concurrent reconciles per controller (default 4)"
    )
    p.add_argument(
        "--iam-key-grace-period",
        type=float,
        default=300.0,
        help="seconds a replaced IAM access key stays valid before deletion (default 300)",
    )
    gcp = GCPEndpoints()
    p.add_argument(
        "--gcp-sts-endpoint",
        default=os.environ.get("ROTATOR_GCP_STS_ENDPOINT", gcp.sts_url),
        help=f"Google STS token endpoint (env ROTATOR_GCP_STS_ENDPOINT; default {gcp.sts_url})",
    )
    p.add_argument(
        "--gcp-iam-credentials-endpoint",
        default=os.environ.get("ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT", gcp.iam_credentials_url),
        help="Google IAM credentials API (env ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT; "
        f"default {gcp.iam_credentials_url})",
    )
    p.add_argument(
        "--gcp-token-uri",
        default=os.environ.get("ROTATOR_GCP_TOKEN_URI"),
        help="replaces the token_uri of service-account keys (env ROTATOR_GCP_TOKEN_URI)",
    )
    p.add_argument(
        "--azure-authority-host",
        default=os.environ.get("ROTATOR_AZURE_AUTHORITY_HOST", azure_endpoints.DEFAULT_AUTHORITY),
        help="Azure AD authority host (env ROTATOR_AZURE_AUTHORITY_HOST; "
        f"default {azure_endpoints.DEFAULT_AUTHORITY})",
    )
    p.add_argument(
        "--allow-insecure-oidc-issuers",
        action="store_true",
        default=os.environ.get("ROTATOR_ALLOW_INSECURE_OIDC_ISSUERS", "").lower() in ("1", "true"),
        help="accept http:// OIDC issuers, which get client secrets in clear: local development "
        "only (env ROTATOR_ALLOW_INSECURE_OIDC_ISSUERS=true; default: https only, an http issuer "
        "fails its policies with reason InsecureIssuer)",
    )
    p.add_argument(
        credentialsources.CONTROLLER_IDENTITY_FLAG,
        type=credentialsources.parse_controller_identity_namespaces,
        default=credentialsources.parse_controller_identity_namespaces(
            os.environ.get("ROTATOR_CONTROLLER_IDENTITY_NAMESPACES", "")
        ),
        metavar="NS1,NS2",
        help="namespaces whose policies may use the controller's own cloud identity "
        "(controllerIdentity: its pod's IAM role, managed or workload identity, service "
        "account), comma-separated; * for all (env ROTATOR_CONTROLLER_IDENTITY_NAMESPACES; "
        "default: none, such policies fail with reason ControllerIdentityNotAllowed)",
    )
    p.add_argument(
        "--sync-period",
        type=float,
        default=36000.0,
        help="seconds between resyncs of every cached object, +/-10%% (default 36000 = 10 h)",
    )
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="default json")
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="default info",
    )


def _flag_bool(value: str) -> bool:
    """A Go-style boolean flag value: ``--flag=false``."""
    lowered = value.lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


def build_parser(prog: str = "rotator") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"rotator {rotator.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the controller manager")
    _add_run_flags(run)
    run.add_argument(
        "--shards",
        type=int,
        default=1,
        help="shards of the namespaces (by the FNV-1a hash of their name), each with a Lease of "
        "its own, shared fairly among the replicas; 1: one leader does all (the default). "
        "Needs --leader-election-namespace outside a cluster, and config/sharding's RBAC",
    )
    dev = sub.add_parser("dev", help="a local control plane plus the controller, in the foreground")
    _add_run_flags(dev, with_kubeconfig=False)
    dev.add_argument(
        "--lifetime",
        type=int,
        default=180,
        help="seconds the credentials minted locally live (default 180: rotations every 2 min)",
    )
    dev.add_argument(
        "--gateway-port",
        type=int,
        default=4000,
        help="the LiteLLM gateway's address for the whole run, 127.0.0.1:PORT (default 4000; "
        "0 or a taken port: a free one, printed)",
    )
    dev.add_argument(
        "--envoy-port",
        type=int,
        default=10000,
        help="the Envoy gateway's listener, 127.0.0.1:PORT (default 10000; 0 or a taken port: a "
        "free one, printed)",
    )
    dev.add_argument(
        "--admin-port",
        type=int,
        default=4001,
        help="the stand-ins' admin endpoint, 127.0.0.1:PORT, for rotator standins (default "
        "4001; 0 or a taken port: a free one, printed)",
    )
    dev.add_argument(
        "--config",
        help="the project's config/ folder (CRDs and samples; default: the checkout's)",
    )
    dev.add_argument(
        "--assets",
        help="folder with etcd, kube-apiserver, kube-controller-manager "
        "(default $KUBEBUILDER_ASSETS)",
    )
    dev.add_argument(
        "--apiserver-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more kube-apiserver flag, repeatable; write it with '=', e.g. "
        "--apiserver-flag=--feature-gates=ShardedListAndWatch=true (the server filters the "
        "lists and watches of shards: docs/operations.md, Shards)",
    )
    dev.set_defaults(
        metrics_bind_address="127.0.0.1:8080",
        metrics_secure=False,  # loopback only, for curl
        health_probe_bind_address="127.0.0.1:8081",
        log_format="text",
        allow_insecure_oidc_issuers=True,  # the local OIDC issuer stand-in is http
    )
    standins = sub.add_parser(
        "standins",
        help="drive a running rotator dev's stand-ins (accept or retire an API key, fail, heal)",
    )
    standins.add_argument(
        "action",
        choices=("status", "accept-key", "retire-key", "wait-released", "fail", "heal"),
        help="status; accept-key KEY (the OpenAI stand-in accepts it too); retire-key KEY (it "
        "refuses it from now on); wait-released KEY (until no gateway proxy carries it); "
        "fail NAME / heal NAME (a stand-in answers 503, or again as it should)",
    )
    standins.add_argument("value", nargs="?", help="the key, or the stand-in's name")
    standins.add_argument(
        "--admin",
        help="the admin endpoint rotator dev printed (default $ROTATOR_DEV_ADMIN, else "
        "http://127.0.0.1:4001)",
    )
    standins.add_argument(
        "--timeout", type=float, default=300.0, help="wait-released: seconds (default 300)"
    )
    commands.add_parsers(sub)
    sub.add_parser("version", help="print the version")
    return parser


def return_large_blocks_to_the_os() -> None:
    """Fixes glibc's mmap threshold at 128 KiB (its initial value).

    glibc raises the threshold each time a large mmapped block is freed, up to 32 MiB; after a
    list of large Secrets has been decoded and dropped, later 1 MiB strings then come from the
    heap, which is rarely given back, and the controller's RSS keeps the peak of its largest
    list. A fixed threshold keeps large values in their own mappings, returned on free. Only on
    glibc; elsewhere nothing is done.
    """
    m_mmap_threshold = -3
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(m_mmap_threshold, 128 * 1024)


def main(argv: Sequence[str] | None = None, *, prog: str = "rotator") -> int:
    return_large_blocks_to_the_os()
    args = build_parser(prog).parse_args(argv)
    if args.command == "version":
        print(f"rotator {rotator.__version__}")
        return 0
    if args.command in commands.COMMANDS:
        return commands.run(args)
    if args.command == "standins":
        return _standins(args)
    logs.configure(args.log_format, args.log_level)
    if args.command == "dev":
        return _dev(args)
    code = _run(args, kubeconfig=args.kubeconfig)
    if code == manager.EXIT_FAILED:
        _exit_now(code)
    return code


def kubectl_plugin() -> int:
    """``kubectl rotator …``: kubectl runs ``kubectl-rotator`` with the words after
    ``rotator``, so this is :func:`main` with the usage saying how it was called."""
    return main(prog="kubectl rotator")


def _exit_now(code: int) -> NoReturn:
    """Ends the process without waiting for any thread, as controller-runtime's ``os.Exit``:
    after leadership is lost (or a reconcile was abandoned at the end of a graceful stop) a
    reconcile still running on a worker thread must not get to write while a successor leads."""
    with contextlib.suppress(Exception):
        logging.shutdown()  # flushes the log handlers
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


SWITCH_INTERVAL = 0.001
"""Seconds a thread holds the GIL while others wait for it (``sys.setswitchinterval``; CPython's
default is 0.005). A start-up over 10,000 chains keeps ~25 threads busy reconciling; each
request of a thread that waits on the network (the lease renewal, the watches) then queues for
the GIL once per socket read. Measured against a local API server with 24 busy threads: a GET
took p50 265 ms, max 1 s at 5 ms; p50 57 ms, max 223 ms at 1 ms. At 5 ms a restart over 10,000
chains and 50,000 Secrets missed the 10 s renew deadline and gave up leadership."""


def _run(
    args: argparse.Namespace,
    *,
    kubeconfig: str | None,
    attach: Callable[[manager.Manager], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        api_client = restconfig.load(
            kubeconfig, in_cluster_dir=args.in_cluster_dir, pool_size=16 + 4 * args.workers
        )
    except restconfig.ConfigNotFound as exc:
        print(f"rotator: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.metrics_secure and args.metrics_cert_dir:
        files = (tlsserving.CERT_NAME, tlsserving.KEY_NAME)
        if not all((Path(args.metrics_cert_dir) / f).is_file() for f in files):
            print(
                f"rotator: --metrics-cert-dir {args.metrics_cert_dir} needs {' and '.join(files)}",
                file=sys.stderr,
            )
            return EXIT_USAGE
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    election = None
    sharded = getattr(args, "shards", 1) != 1  # only `rotator run` has --shards
    if args.leader_elect or sharded:
        namespace = args.leader_election_namespace or restconfig.in_cluster_namespace(
            args.in_cluster_dir
        )
        if not namespace:
            print(
                "rotator: --leader-election-namespace is required when not running in a cluster",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            election = leaderelection.LeaderElectionOptions(
                name=args.leader_election_id,
                namespace=namespace,
                identity=identity,
                lease_duration=args.leader_election_lease_duration,
                renew_deadline=args.leader_election_renew_deadline,
                retry_period=args.leader_election_retry_period,
            )
            shard_options = (
                shards.ShardOptions(
                    id=args.leader_election_id,
                    namespace=namespace,
                    identity=identity,
                    shards=args.shards,
                    lease_duration=election.lease_duration,
                    renew_deadline=election.renew_deadline,
                    retry_period=election.retry_period,
                )
                if sharded
                else None
            )
        except ValueError as exc:
            print(f"rotator: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if shard_options is not None:
            return _run_sharded(args, api_client, shard_options, identity, stop)
    metrics = metric_families.Metrics(prefix="rotator")
    client = clients.Client(api_client, metrics=metrics.for_requests(api_client.configuration.host))
    if election is not None:  # the way back from shards: wait until they stopped
        hold_back = shards.SingleLeaderHoldBack(
            client,
            lease_id=election.name,
            namespace=election.namespace,
            lease_duration=election.lease_duration,
        )
        election = dataclasses.replace(election, hold_back=hold_back)
    options = _manager_options(args, identity, election)
    clock = clocks.RealClock()  # the one time source of the manager and the reconcilers
    mgr = manager.Manager(client, options, metrics=metrics, clock=clock)
    setup.register(mgr, clock=clock, options=_chain_options(args))
    if attach is not None:
        attach(mgr)
    stop = stop or _stop_on_signals()
    log.info("rotator.starting", version=rotator.__version__, identity=identity, server=client.host)
    return mgr.run(stop)


def _manager_options(
    args: argparse.Namespace,
    identity: str,
    election: leaderelection.LeaderElectionOptions | None,
) -> manager.ManagerOptions:
    """The manager's options from the flags: one place for the single leader's manager and a
    sharded replica's shared one (which elects nothing itself)."""
    return manager.ManagerOptions(
        namespaces=tuple(args.namespaces),
        metrics_bind_address=args.metrics_bind_address,
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=args.metrics_cert_dir,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_election=election,
        identity=identity,
        freeze_heap=True,
        informer=InformerOptions(resync_period=args.sync_period),
    )


def _chain_options(args: argparse.Namespace) -> setup.ChainOptions:
    return setup.ChainOptions(
        workers=args.workers,
        iam_key_grace_period=args.iam_key_grace_period,
        gcp_endpoints=GCPEndpoints(
            sts_url=args.gcp_sts_endpoint,
            iam_credentials_url=args.gcp_iam_credentials_endpoint,
            token_uri=args.gcp_token_uri,
        ),
        azure_authority_host=args.azure_authority_host,
        allow_insecure_oidc_issuers=args.allow_insecure_oidc_issuers,
        controller_identity_namespaces=args.controller_identity_namespaces,
    )


def _run_sharded(
    args: argparse.Namespace,
    api_client: kubelib.Connection,
    shard_options: shards.ShardOptions,
    identity: str,
    stop: threading.Event | None,
) -> int:
    """``--shards N`` (N > 1): the shared parts in a manager without controllers or leader
    election, and a shard coordinator that builds the chain's controllers per shard it takes
    (controllers/runtime/shards.py)."""
    metrics = metric_families.Metrics(prefix="rotator", sharded=True)
    client = clients.Client(api_client, metrics=metrics.for_requests(api_client.configuration.host))
    options = _manager_options(args, identity, None)  # the shards' Leases are the coordinator's
    clock = clocks.RealClock()
    mgr = manager.Manager(client, options, metrics=metrics, clock=clock)
    build = setup.per_shard(mgr, options=_chain_options(args), clock=clock)
    # a shard's size is its chains: what a replica's memory follows (docs/design.md, "Shards")
    sharded = shards.ShardedManager(mgr, shard_options, register=build, sized_by=api.POLICIES)
    stop = stop or _stop_on_signals()
    log.info(
        "rotator.starting",
        version=rotator.__version__,
        identity=identity,
        server=client.host,
        shards=shard_options.shards,
    )
    return sharded.run(stop)


def _dev(args: argparse.Namespace) -> int:
    # The dev kit (control-plane launcher, stand-ins, manifest tools) is a distribution of its
    # own, in the repository's devkit/ folder: never in the product's wheel or image.
    try:
        from rotator_devkit.controlplane import assets as cp_assets  # noqa: PLC0415
        from rotator_devkit.devenv import environment, manifests, table  # noqa: PLC0415
    except ImportError as exc:
        print(
            "rotator: rotator dev needs the dev kit, which ships in the repository: "
            f"pip install -e ./devkit (make dev does) ({exc})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        folder = cp_assets.find(args.assets)
    except cp_assets.AssetsNotFound as exc:
        print(f"rotator: {exc}", file=sys.stderr)
        return EXIT_USAGE
    config = Path(args.config) if args.config else manifests.CONFIG
    if not (config / "crd" / "bases").is_dir() or not (config / "samples").is_dir():
        print(
            f"rotator: no CRDs and samples under {config}: run rotator dev from a checkout of "
            "rotator (make dev) or pass --config with its config/ folder",
            file=sys.stderr,
        )
        return EXIT_USAGE
    log.info(
        "dev.starting",
        assets=str(folder),
        lifetime=args.lifetime,
        apiserver_flags=args.apiserver_flag,
    )
    # Ctrl-C only sets this, from here on: a KeyboardInterrupt raised at an arbitrary point of
    # the start (it once landed inside logging's fork handler and left its lock held, hanging the
    # stop) cannot be cleaned up after reliably. The start runs to its end, then everything stops.
    stop = _stop_on_signals()
    env = environment.DevEnvironment(
        folder,
        config=config,
        lifetime=args.lifetime,
        gateway_port=args.gateway_port,
        envoy_port=args.envoy_port,
        admin_port=args.admin_port,
        apiserver_flags=tuple(args.apiserver_flag),
    )
    live: list[table.LiveTable] = []
    try:
        env.start()
        if stop.is_set():
            print("\nrotator dev: interrupted while starting, stopped", file=sys.stderr)
            return EXIT_INTERRUPTED
        endpoints = env.controller_env()
        args.gcp_sts_endpoint = endpoints.pop("ROTATOR_GCP_STS_ENDPOINT")
        args.gcp_iam_credentials_endpoint = endpoints.pop("ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT")
        args.azure_authority_host = endpoints.pop("ROTATOR_AZURE_AUTHORITY_HOST")
        # boto3, requests, azure-identity and google-auth read these themselves (google-auth's
        # GCE_METADATA_HOST when google.auth.compute_engine is first imported: on first use)
        os.environ.update(endpoints)
        # the samples' namespace may use the controller's identity: the stand-ins' one
        args.controller_identity_namespaces |= {environment.NAMESPACE}
        kubeconfig = str(env.kubeconfig)
        kubectl = folder / "kubectl"
        tool = str(kubectl) if os.access(kubectl, os.X_OK) else "kubectl"
        print(f"\nkubeconfig: {kubeconfig}", flush=True)
        print(f"look around: {tool} --kubeconfig {kubeconfig} get rotator -A", flush=True)
        print(
            f"stand-ins admin: {env.admin_url} (export ROTATOR_DEV_ADMIN={env.admin_url}; "
            "rotator standins --help)\n",
            flush=True,
        )

        def attach(mgr: manager.Manager) -> None:
            informer = mgr.cache.informer(api.POLICIES)
            live.append(table.LiveTable(informer.store, sys.stdout, gateways=env.gateway_rows))
            informer.add_handler(live[0])
            env.on_gateway_change(live[0].refresh)
            live[0].start()

        return _run(args, kubeconfig=kubeconfig, attach=attach, stop=stop)
    finally:
        for t in live:
            t.stop()
        env.stop()


def _standins(args: argparse.Namespace) -> int:
    try:
        from rotator_devkit.devenv import control  # noqa: PLC0415
    except ImportError as exc:
        print(
            f"rotator: rotator standins needs the dev kit: pip install -e ./devkit ({exc})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.action not in ("status",) and not args.value:
        print(f"rotator standins {args.action}: say which key or stand-in", file=sys.stderr)
        return EXIT_USAGE
    return control.run(
        args.action, args.value, url=args.admin or control.default_url(), timeout=args.timeout
    )


def _stop_on_signals() -> threading.Event:
    """SIGTERM/SIGINT ask for a graceful stop; a second one exits at once."""
    stop = threading.Event()

    def handle(signum: int, _: FrameType | None) -> None:
        if stop.is_set():
            log.warning("rotator.forced_exit", signal=signal.Signals(signum).name)
            os._exit(1)
        log.info("rotator.stop_requested", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


if __name__ == "__main__":
    sys.exit(main())

"""The ``status`` and ``renew`` subcommands on the ``rotator`` command line (and ``kubectl
rotator``): their flags, and the one place their errors become messages and exit codes
(:mod:`controllers.commands.errors`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from controllers.commands import renew, servedby, status, target
from controllers.commands.errors import EXIT_OK, CommandError, UsageError
from controllers.runtime import clock as clocks
from controllers.runtime import errors, kubelib, restconfig
from rotator import durations

COMMANDS = ("status", "renew")
OBJECT_HELP = "bsp/NAME, backendsecuritypolicy/NAME, backendsecuritypolicies/NAME, or bsp NAME"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``status`` and ``renew`` on the CLI's subcommands."""
    st = sub.add_parser(
        "status",
        help="show a policy: who serves it, conditions, credential times, derived Secret, "
        "routes, events",
        description="Shows a BackendSecurityPolicy as cmctl shows a Certificate: the replica "
        "(and with --shards, the shard) that serves it, from the controller's Leases; its "
        "conditions, when the served credential was issued, expires and is renewed, the last "
        "failure, the derived Secret (name and keys, never data), the ServiceBackends it "
        f"targets, the Routes that embed it, and its last {status.MAX_EVENTS} Events.",
    )
    _add_common(st)
    st.add_argument(
        "--leader-election-namespace",
        default=servedby.LeaseOptions.namespace,
        help="the controller's namespace, where its Leases are (as rotator run's flag; "
        f"default {servedby.LeaseOptions.namespace})",
    )
    st.add_argument(
        "--leader-election-id",
        default=servedby.LeaseOptions.id,
        help="the controller's Lease name, and its shards' prefix (as rotator run's flag; "
        f"default {servedby.LeaseOptions.id}, the Helm release rotator's; another "
        "release's is its full name and -leader-election)",
    )
    rn = sub.add_parser(
        "renew",
        help="ask for a new credential now (--wait: until it is served)",
        description="Sets rotator.dev/rotate-requested-at on a BackendSecurityPolicy, which "
        "makes rotator mint a new credential now. With --wait, returns once the new credential "
        "is in the derived Secret and prints how long that took; exits 1 when the refresh "
        "fails for a reason no retry gets past, or at the timeout.",
    )
    _add_common(rn)
    rn.add_argument("--wait", action="store_true", help="wait until the new credential is served")
    rn.add_argument(
        "--timeout",
        type=_duration,
        default=renew.RenewOptions.timeout,
        metavar="DURATION",
        help="how long --wait waits, a Go duration such as 30s or 5m (default 2m)",
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("object", nargs="+", metavar="OBJECT", help=OBJECT_HELP)
    p.add_argument(
        "-n",
        "--namespace",
        help="the policy's namespace (default: the kubeconfig context's, as kubectl)",
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )


def _duration(text: str) -> float:
    try:
        return durations.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration such as 30s, 2m or 1m30s"
        ) from None


def run(
    args: argparse.Namespace,
    *,
    clock: clocks.Clock | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Runs ``args.command``; returns its exit code, having printed any failure on ``err``."""
    clock = clock or clocks.RealClock()
    out, err = out or sys.stdout, err or sys.stderr
    try:
        where = target.connect(args.object, kubeconfig=args.kubeconfig, namespace=args.namespace)
        if args.command == "status":
            try:
                leases = servedby.LeaseOptions(
                    args.leader_election_namespace, args.leader_election_id
                )
                snapshot = status.read(where, leases)
            except errors.NotFound:
                raise CommandError(
                    f'backendsecuritypolicy "{where.name}" not found in namespace '
                    f'"{where.namespace}"'
                ) from None
            out.write(status.render(snapshot, clock.now()))
        else:
            options = renew.RenewOptions(wait=args.wait, timeout=args.timeout)
            renew.renew(where, options, clock=clock, sleep=time.sleep, out=out, err=err)
    except (restconfig.ConfigNotFound, kubelib.ConfigException) as exc:
        return _failed(UsageError(str(exc)), err)
    except CommandError as exc:
        return _failed(exc, err)
    except errors.ApiError as exc:
        return _failed(CommandError(str(exc)), err)
    return EXIT_OK


def _failed(exc: CommandError, err: TextIO) -> int:
    print(f"rotator: {exc}", file=err)
    return exc.exit_code

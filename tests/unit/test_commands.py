"""``rotator status`` and ``rotator renew`` without a cluster: the text they print (times
relative to an injected clock), how they read the command line and the kubeconfig, and when
``renew --wait`` stops — on a fake clock whose sleeps advance it."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers import cli
from controllers.commands import entry, humanize, policyview, renew, servedby, status, target
from controllers.commands.errors import CommandError, UsageError
from controllers.reconcilers import api
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects, sharding
from tests.support import memapi

NOW = clocks.parse_rfc3339("2026-11-29T12:00:00Z")


def at(offset: float) -> str:
    return clocks.rfc3339(NOW + offset)


# --- times --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59.9, "59s"),  # truncated, as kubectl
        (119, "119s"),
        (120, "2m"),
        (250, "4m10s"),
        (41 * 60 + 30, "41m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600 + 15 * 60, "3h15m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400 + 4 * 3600, "2d4h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400 + 5 * 86400, "3y5d"),
        (10 * 365 * 86400, "10y"),
        (-250, "4m10s"),
    ],
)
def test_durations_read_like_kubectl_ages(seconds: float, text: str) -> None:
    assert humanize.duration(seconds) == text


def test_relative_times_follow_the_injected_clock() -> None:
    clock = clocks.FakeClock(start=NOW)
    expiry = at(41 * 60)
    assert humanize.timestamp(expiry, clock.now()) == f"{expiry} (in 41m)"
    clock.advance(41 * 60)
    assert humanize.timestamp(expiry, clock.now()) == f"{expiry} (now)"
    clock.advance(3 * 60)
    assert humanize.timestamp(expiry, clock.now()) == f"{expiry} (3m ago)"
    assert humanize.age(expiry, clock.now()) == "3m"


def test_absent_and_unreadable_times_are_said_so() -> None:
    assert humanize.timestamp(None, NOW) == "-"
    assert humanize.timestamp("yesterday", NOW) == "yesterday"
    assert humanize.age("yesterday", NOW) == "-"


def test_measured_durations_keep_a_tenth_of_a_second() -> None:
    assert humanize.seconds(1.26) == "1.3 s"
    assert humanize.seconds(185) == "3m5s"


def test_fields_and_tables_are_aligned() -> None:
    assert humanize.fields([("Name", "a"), ("Last failure", "-")]) == [
        "Name:          a",
        "Last failure:  -",
    ]
    assert humanize.table(("A", "LONG HEADER", "C"), [("xyz", "1", "last")]) == [
        "  A    LONG HEADER  C",
        "  xyz  1            last",
    ]


# --- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "words",
    [
        ["bsp/sa"],
        ["backendsecuritypolicy/sa"],
        ["backendsecuritypolicies/sa"],
        ["BSP/sa"],
        ["backendsecuritypolicies.rotator.dev/sa"],
        ["bsp", "sa"],
    ],
)
def test_a_policy_is_named_as_kubectl_names_it(words: list[str]) -> None:
    assert target.policy_name(words) == "sa"


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["sa"], "expected bsp/NAME"),
        (["route/claude"], "'route' is not a BackendSecurityPolicy"),
        (["bsp/"], "expected bsp/NAME"),
        (["bsp/a/b"], "expected bsp/NAME"),
        (["bsp/a", "bsp/b"], "expected bsp/NAME"),
    ],
)
def test_anything_else_is_a_usage_error(words: list[str], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        target.policy_name(words)


def test_usage_errors_exit_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "route/claude", "--kubeconfig", "/nonexistent"]) == 2
    assert "'route' is not a BackendSecurityPolicy" in capsys.readouterr().err
    assert cli.main(["status", "bsp/x", "--kubeconfig", "/nonexistent"]) == 2
    assert "kubeconfig file not found: /nonexistent" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["renew", "bsp/x", "--wait", "--timeout", "soon"])
    assert exited.value.code == 2
    assert "'soon' is not a duration" in capsys.readouterr().err


def test_the_kubectl_plugin_says_how_it_was_called(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["renew", "--help"], prog="kubectl rotator")
    assert capsys.readouterr().out.startswith("usage: kubectl rotator renew")


def kubeconfig(path: Path, namespace: str | None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": context}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_the_namespace_comes_from_the_kubeconfig_context(tmp_path: Path) -> None:
    with_ns = str(kubeconfig(tmp_path / "a", "team-a"))
    without = str(kubeconfig(tmp_path / "b", None))
    assert target.default_namespace(with_ns, environ={}) == "team-a"
    assert target.default_namespace(None, environ={"KUBECONFIG": with_ns}) == "team-a"
    assert target.default_namespace(without, environ={}) == "default"
    where = target.connect(["bsp/x"], kubeconfig=with_ns, namespace=None, environ={})
    assert (where.namespace, where.name) == ("team-a", "x")
    flagged = target.connect(["bsp/x"], kubeconfig=with_ns, namespace="other", environ={})
    assert flagged.namespace == "other"


def test_in_a_cluster_the_namespace_is_the_pods(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "namespace").write_text("rotator-system\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert (
        target.default_namespace(None, environ=environ, in_cluster_dir=str(tmp_path))
        == "rotator-system"
    )


# --- what a policy says -------------------------------------------------------------------------


def test_copied_and_minted_sources_are_told_apart() -> None:
    assert policyview.copies({"type": "APIKey", "apiKey": {"secretRef": {}}})
    aws_file = {"type": "AWSCredentials", "awsCredentials": {"credentialsFile": {}}}
    assert policyview.copies(aws_file)
    chained = {
        "type": "AWSCredentials",
        "awsCredentials": {"credentialsFile": {}, "assumeRole": {}},
    }
    assert not policyview.copies(chained), "a chain on a file mints sessions"
    assert policyview.source_of(chained) == "credentialsFile+assumeRole"
    sa = {"type": "AWSCredentials", "awsCredentials": {"region": "r", "serviceAccountToken": {}}}
    assert not policyview.copies(sa)
    assert not policyview.copies({"type": "GCPCredentials", "gcpCredentials": {}})
    assert policyview.source_of(sa) == "serviceAccountToken"
    assert policyview.source_of({"type": "APIKey"}) == ""


def ready(status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message}


def failing(attempts: int, last: str | None, *conds: dict[str, Any]) -> dict[str, Any]:
    st: dict[str, Any] = {"failedAttempts": attempts, "conditions": list(conds)}
    if last:
        st["lastFailureTime"] = last
    return {"status": st}


def test_only_a_failure_after_the_request_counts_and_only_some_are_final() -> None:
    before = policyview.Attempts.of(failing(2, at(-5)))
    same = failing(2, at(-5), ready("False", "ProviderRejected"))
    assert policyview.failure_since(before, same) is None, "that failure came before the request"
    rejected = policyview.failure_since(before, failing(3, at(0), ready("False", "SecretNotFound")))
    assert rejected is not None
    assert rejected.permanent
    assert str(rejected) == "Ready=False SecretNotFound: m"
    for cond in (ready("False", "ProviderUnavailable"), ready("False", "Expired")):
        again = policyview.failure_since(before, failing(3, at(0), cond))
        assert again is not None
        assert not again.permanent, cond
    still_valid = policyview.failure_since(
        policyview.Attempts.of({}), failing(1, at(0), ready("True", "RotationFailed"))
    )
    assert still_valid is not None
    assert not still_valid.permanent
    assert policyview.failure_since(before, failing(0, at(-5), ready("True", "x"))) is None


# --- status ------------------------------------------------------------------------------------

SECRET_VALUE = "AKIA-this-is-secret-data-0123456789"


def policy(**status_fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {
            "name": "sa",
            "namespace": "team-a",
            "uid": "u-1",
            "creationTimestamp": at(-3600),
            "annotations": {api.ROTATE_REQUESTED_ANNOTATION: "r-1"},
        },
        "spec": {
            "type": "AWSCredentials",
            "targetRefs": [{"name": "bedrock"}, {"name": "gone"}],
            "awsCredentials": {"region": "us-east-1", "serviceAccountToken": {}},
        },
        "status": status_fields,
    }


def snapshot() -> status.Snapshot:
    secret = {
        "metadata": {
            "name": "rotator-bsp-sa",
            "annotations": {
                api.ISSUED_AT_ANNOTATION: at(-20 * 60),
                api.EXPIRATION_ANNOTATION: at(41 * 60),
                api.ANSWERED_REQUEST_ANNOTATION: "r-1",
            },
        },
        "data": {"credentials": base64.b64encode(SECRET_VALUE.encode()).decode()},
    }
    return status.Snapshot(
        policy(
            conditions=[
                {
                    "type": "Accepted",
                    "status": "True",
                    "reason": "Accepted",
                    "lastTransitionTime": at(-3600),
                    "message": "the spec is valid",
                },
                {**ready("True", "CredentialsReady", "credentials are in Secret rotator-bsp-sa")}
                | {"lastTransitionTime": at(-180)},
            ],
            renewalTime=at(20 * 60),
            failedAttempts=0,
            lastFailureTime=at(-2 * 86400),
            derivedSecretName="rotator-bsp-sa",
        ),
        policyview.Served.of(secret),
        [
            (
                "bedrock",
                {"status": {"conditions": [{"type": "ResolvedRefs", "status": "True"}]}},
            ),
            ("gone", None),
        ],
        [
            {
                "metadata": {"name": "claude"},
                "status": {
                    "conditions": [
                        {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs"},
                        {"type": "Programmed", "status": "False", "reason": "ConfigTooLarge"},
                    ]
                },
            }
        ],
        [
            {
                "type": "Normal",
                "reason": "CredentialsRotated",
                "message": "new credentials in Secret rotator-bsp-sa",
                "source": {"component": "rotator"},
                "firstTimestamp": at(-600),
                "lastTimestamp": at(-60),
                "count": 4,
            }
        ],
        servedby.Leases(
            servedby.LeaseOptions(),
            (lease("rotator-leader-election", "rotator-7d9c-abcde_1a2b3c4d", renewed=-2),),
        ),
    )


def test_status_shows_every_section_with_times_relative_to_now() -> None:
    text = status.render(snapshot(), NOW)
    assert text == "\n".join(
        [
            "Name:       sa",
            "Namespace:  team-a",
            "Type:       AWSCredentials (serviceAccountToken, minted)",
            f"Created:    {at(-3600)} (60m ago)",
            "Targets:    ServiceBackend bedrock (ResolvedRefs=True), ServiceBackend gone (not found)",
            "Served by:  leader rotator-7d9c-abcde_1a2b3c4d (Lease rotator-leader-election), renewed 2s ago",
            "Conditions:",
            "  TYPE      STATUS  REASON            SINCE                           MESSAGE",
            f"  Accepted  True    Accepted          {at(-3600)} (60m ago)  the spec is valid",
            f"  Ready     True    CredentialsReady  {at(-180)} (3m ago)   credentials are in Secret rotator-bsp-sa",
            "Credential:",
            "  Secret:            rotator-bsp-sa (keys: credentials)",
            f"  Issued:            {at(-1200)} (20m ago)",
            f"  Expires:           {at(2460)} (in 41m)",
            f"  Next renewal:      {at(1200)} (in 20m)",
            "  Failed attempts:   0",
            f"  Last failure:      {at(-2 * 86400)} (2d ago)",
            "  Rotation request:  r-1 (answered)",
            "Routes:",
            "  NAME    RESOLVEDREFS  PROGRAMMED            CONFIG SECRET",
            "  claude  True          False ConfigTooLarge  rotator-route-claude",
            "Events:",
            "  LAST SEEN          TYPE    REASON              FROM     MESSAGE",
            "  60s (x4 over 10m)  Normal  CredentialsRotated  rotator  new credentials in Secret rotator-bsp-sa",
            "",
        ]
    )
    assert SECRET_VALUE not in text
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in text


def test_the_served_view_keeps_no_data() -> None:
    served = snapshot().served
    assert served is not None
    assert SECRET_VALUE not in repr(served)
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in repr(served)


def test_status_of_a_new_copied_policy_says_what_is_missing() -> None:
    fresh = policy()
    fresh["spec"] = {"type": "APIKey", "apiKey": {"secretRef": {"name": "k"}}}
    del fresh["metadata"]["annotations"]
    text = status.render(
        status.Snapshot(
            fresh,
            None,
            [],
            [],
            [],
            servedby.Leases(servedby.LeaseOptions(), error="forbidden"),
            {"events": "GET /api/v1/...: forbidden (403)"},
        ),
        NOW,
    )
    assert "Type:       APIKey (copied)" in text
    assert "  <none: not reconciled yet>" in text
    assert "  Secret:            rotator-bsp-sa (not written yet)" in text
    assert "  Expires:           never" in text
    assert "  Next renewal:      - (copied: follows its Secret, whenever it changes)" in text
    assert "  Rotation request:  -" in text
    assert "Routes:\n  <none>" in text
    assert "Events:\n  <cannot read events: GET /api/v1/...: forbidden (403)>" in text
    assert "Served by:  unknown (cannot list Leases in rotator-system: forbidden)\n" in text


# --- who serves it: the Leases ---------------------------------------------------------------

LEASE_NS, LEASE_ID = "rotator-system", "rotator-leader-election"


def lease(name: str, holder: str, *, renewed: float = -2, duration: int = 15) -> dict[str, Any]:
    """A Lease as leaderelection.py writes it, renewed ``renewed`` seconds from :data:`NOW`."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NS},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": clocks.rfc3339(NOW - 3600),
            "renewTime": clocks.rfc3339(NOW + renewed).replace("Z", ".000000Z"),  # a MicroTime
            "leaseTransitions": 0,
        },
    }


def shard_leases(n: int, holder: str = "r_1", **kw: Any) -> list[dict[str, Any]]:
    return [lease(f"{LEASE_ID}-shard-{i}-of-{n}", holder, **kw) for i in range(n)]


def served(*items: dict[str, Any], namespace: str = "team-a", now: float = NOW) -> list[str]:
    leases = servedby.Leases(servedby.LeaseOptions(), tuple(items))
    return humanize.fields(servedby.rows(leases, namespace, now))


SHARD = sharding.shard_of("team-a", 6)
SHARD_LEASE = f"{LEASE_ID}-shard-{SHARD}-of-6"
SHARD_ROW = (
    f"Shard:      {SHARD} of 6: hashes [0x{SHARD * 2**64 // 6:016x}, "
    f"0x{(SHARD + 1) * 2**64 // 6:016x}); FNV-1a of team-a is "
    f"0x{sharding.fnv1a64('team-a'):016x}"
)


def test_the_single_leader_serves_every_policy() -> None:
    assert served(lease(LEASE_ID, "rotator-xyz_ab12cd34", renewed=-1)) == [
        f"Served by:  leader rotator-xyz_ab12cd34 (Lease {LEASE_ID}), renewed 1s ago"
    ]


def test_with_shards_the_namespaces_shard_and_its_holder_serve_it() -> None:
    """N is read from the Lease names; leftovers are not live and are left out: the released
    single-leader Lease after the upgrade, an earlier N's released Leases, the members'."""
    holders = [lease(f"{LEASE_ID}-shard-{i}-of-6", f"rotator-{i}_ff", renewed=-i) for i in range(6)]
    leftovers = [
        lease(LEASE_ID, ""),
        *shard_leases(4, ""),
        lease(f"{LEASE_ID}-member-rotator-0-ff", "rotator-0_ff"),
    ]
    assert served(*holders, *leftovers) == [
        f"Served by:  shard {SHARD} of 6 (Lease {SHARD_LEASE}), held by rotator-{SHARD}_ff, "
        f"renewed {f'{SHARD}s ago' if SHARD else 'now'}",
        SHARD_ROW,
    ]
    other = next(ns for ns in (f"ns-{k}" for k in range(100)) if sharding.shard_of(ns, 6) != SHARD)
    assert (
        f"held by rotator-{sharding.shard_of(other, 6)}_ff" in served(*holders, namespace=other)[0]
    )


def test_a_holder_or_an_error_with_control_characters_reaches_the_terminal_escaped() -> None:
    """Anyone who may update a Lease writes its holder: an escape sequence or a line break in
    it is printed as text, never as a forged line or a terminal command."""
    forged = "r_1\x1b]8;;http://evil\x07\nConditions:  Ready True"
    assert served(lease(LEASE_ID, forged, renewed=-1)) == [
        f"Served by:  leader r_1\\x1b]8;;http://evil\\x07\\nConditions:  Ready True "
        f"(Lease {LEASE_ID}), renewed 1s ago"
    ]
    fake = memapi.MemAPI()
    fake.fail(errors.ServerError("down\nSecrets:  forged", status=503, reason="ServiceUnavailable"))
    assert servedby.read(fake, servedby.LeaseOptions()).error == (
        "down\\nSecrets:  forged (503 ServiceUnavailable)"
    )


def test_a_lease_is_live_until_its_renew_time_plus_its_duration() -> None:
    clock = clocks.FakeClock(start=NOW)
    held = lease(SHARD_LEASE, "gone_1", renewed=0, duration=15)
    clock.advance(14.9)
    assert served(held, now=clock.now())[0].startswith(f"Served by:  shard {SHARD} of 6 (")
    clock.advance(0.1)
    assert served(held, now=clock.now()) == [
        f"Served by:  no one: shard {SHARD} of 6 (Lease {SHARD_LEASE}), held by gone_1, "
        "expired now (renewed 15s ago, for 15s)",
        SHARD_ROW,
    ]
    clock.advance(40)
    assert "expired 40s ago (renewed 55s ago, for 15s)" in served(held, now=clock.now())[0]


def test_a_shard_without_a_live_holder_is_served_by_no_one() -> None:
    others = [x for x in shard_leases(6) if x["metadata"]["name"] != SHARD_LEASE]
    assert served(*others)[0] == (
        f"Served by:  no one: shard {SHARD} of 6 (Lease {SHARD_LEASE}): no such Lease (no "
        "replica has taken it)"
    )
    assert served(*others, lease(SHARD_LEASE, ""))[0] == (
        f"Served by:  no one: shard {SHARD} of 6 (Lease {SHARD_LEASE}): no holder (released)"
    )


def test_with_nothing_live_every_candidate_says_why() -> None:
    assert served(lease(LEASE_ID, ""), lease(SHARD_LEASE, "gone_1", renewed=-60)) == [
        "Served by:  no one, no Lease is live:",
        f"            leader (Lease {LEASE_ID}): no holder (released)",
        f"            shard {SHARD} of 6 (Lease {SHARD_LEASE}), held by gone_1, expired 45s ago "
        "(renewed 60s ago, for 15s)",
        SHARD_ROW,
    ]


def test_several_live_leases_are_all_shown() -> None:
    """Between one leader and shards, or from N to M shards: each live holder is named."""
    four = sharding.shard_of("team-a", 4)
    lines = served(lease(LEASE_ID, "old_1"), lease(SHARD_LEASE, "new_1"), *shard_leases(4, "new_2"))
    assert lines[:4] == [
        "Served by:  3 live Leases at once (a change between one leader and shards, or of their "
        "number, is under way):",
        f"            leader old_1 (Lease {LEASE_ID}), renewed 2s ago",
        f"            shard {four} of 4 (Lease {LEASE_ID}-shard-{four}-of-4), held by new_2, "
        "renewed 2s ago",
        f"            shard {SHARD} of 6 (Lease {SHARD_LEASE}), held by new_1, renewed 2s ago",
    ]
    assert lines[4].startswith(f"Shard:      {four} of 4: hashes [")
    assert lines[5] == " " * 12 + SHARD_ROW.removeprefix("Shard:      ")


def test_without_leases_or_the_right_to_list_them_it_is_unknown() -> None:
    assert served(lease("someone-else", "x_1")) == [
        f"Served by:  unknown (no Lease {LEASE_ID} or {LEASE_ID}-shard-<i>-of-<N> in "
        f"{LEASE_NS}: rotator runs without leader election, elsewhere, or with another "
        "--leader-election-id)"
    ]
    denied = servedby.Leases(servedby.LeaseOptions(), error="forbidden")
    assert servedby.rows(denied, "team-a", NOW) == [
        ("Served by", f"unknown (cannot list Leases in {LEASE_NS}: forbidden)")
    ]


def test_the_leases_are_listed_once_where_the_flags_say() -> None:
    fake = memapi.MemAPI()
    fake.put(objects.LEASES, lease("ops-rotator-leader-election", "a_1"))
    here = lease("ops-rotator-leader-election", "b_1")
    here["metadata"]["namespace"] = "ops"
    fake.put(objects.LEASES, here)
    where = servedby.LeaseOptions(namespace="ops", id="ops-rotator-leader-election")
    read = servedby.read(fake, where)
    assert [x["spec"]["holderIdentity"] for x in read.items] == ["b_1"]
    assert read.where == where
    assert [c.verb for c in fake.calls] == [memapi.Verb.LIST]
    fake.fail(errors.Forbidden("leases is forbidden", status=403, reason="Forbidden"))
    assert servedby.read(fake, where).error == "forbidden"
    fake.fail(errors.ServerError("etcd is down", status=503, reason="ServiceUnavailable"))
    assert servedby.read(fake, where).error == "etcd is down (503 ServiceUnavailable)"


def test_status_looks_for_the_leases_where_rotator_run_puts_them_by_default() -> None:
    args = cli.build_parser().parse_args(["status", "bsp/x"])
    assert (args.leader_election_namespace, args.leader_election_id) == (
        "rotator-system",
        cli.build_parser().parse_args(["run"]).leader_election_id,
    )
    flagged = cli.build_parser().parse_args(
        ["status", "bsp/x", "--leader-election-namespace", "ops", "--leader-election-id", "o"]
    )
    assert (flagged.leader_election_namespace, flagged.leader_election_id) == ("ops", "o")


# --- renew --wait, on a fake clock -----------------------------------------------------------


class Renewal:
    """The two objects renew reads, on the in-memory API server, and what the controller does in
    between: ``script`` is called with the requested annotation value before every read after
    the request."""

    def __init__(self, pol: dict[str, Any], script: Any) -> None:
        self.api = memapi.MemAPI()
        self.api.put(api.POLICIES, pol)
        self.served({})
        self.script = script
        self.reads = 0
        self.api.intercept(self._before)

    def _before(self, call: memapi.Call) -> None:
        if call.verb is not memapi.Verb.GET:
            return
        if call.resource == objects.SECRETS:
            assert call.metadata_only, "renew never reads the Secret's data"
        if requests := self.requests():
            self.script(
                self, requests[-1]["metadata"]["annotations"][api.ROTATE_REQUESTED_ANNOTATION]
            )

    def requests(self) -> list[Any]:
        """The patches renew sent to the policy."""
        return [w.body for w in self.api.writes_to(api.POLICIES)]

    def served(self, annotations: dict[str, str]) -> None:
        """The controller (re)wrote the derived Secret with ``annotations``."""
        self.api.put(
            objects.SECRETS,
            {
                "metadata": {
                    "name": "rotator-bsp-sa",
                    "namespace": "team-a",
                    "annotations": annotations,
                }
            },
        )

    def status(self, status: dict[str, Any]) -> None:
        """The controller wrote the policy's status."""
        was = self.api.stored(api.POLICIES, "team-a", "sa")
        assert was is not None
        self.api.put(api.POLICIES, {**was, "status": status})


def run_renew(fake: Renewal, timeout: float = 10.0) -> tuple[str, str, float]:
    clock = clocks.FakeClock(start=NOW)
    out, err = io.StringIO(), io.StringIO()
    where = target.Target(fake.api, "team-a", "sa")
    options = renew.RenewOptions(wait=True, timeout=timeout, interval=0.5)
    try:
        renew.renew(where, options, clock=clock, sleep=clock.advance, out=out, err=err)
    finally:
        elapsed = clock.monotonic()
    return out.getvalue(), err.getvalue(), elapsed


def test_renew_waits_until_the_derived_secret_answers_this_request() -> None:
    def controller(fake: Renewal, value: str) -> None:
        fake.reads += 1
        if fake.reads >= 5:  # the third poll (each reads the Secret, then the policy)
            fake.served(
                {
                    api.ANSWERED_REQUEST_ANNOTATION: value,
                    api.ISSUED_AT_ANNOTATION: at(1),
                    api.EXPIRATION_ANNOTATION: at(3601),
                }
            )

    fake = Renewal(policy(), controller)
    out, _, elapsed = run_renew(fake)
    value = renew.request_value(NOW)
    assert value == "2026-11-29T12:00:00.000000Z"
    assert fake.requests() == [
        {"metadata": {"annotations": {api.ROTATE_REQUESTED_ANNOTATION: value}}}
    ]
    assert elapsed == 1.0
    assert out.splitlines() == [
        f"rotation requested: backendsecuritypolicy/sa in namespace team-a "
        f"({api.ROTATE_REQUESTED_ANNOTATION}={value})",
        "renewed in 1.0 s: backendsecuritypolicy/sa in namespace team-a serves a new credential "
        f"in Secret rotator-bsp-sa, issued {at(1)} (now), expires {at(3601)} (in 60m)",
    ]


def test_renew_fails_at_once_on_a_final_failure() -> None:
    def controller(fake: Renewal, value: str) -> None:
        fake.status(
            {
                "failedAttempts": 1,
                "lastFailureTime": at(0),
                "conditions": [ready("False", "ServiceAccountNotPermitted", "not allowed")],
            }
        )

    with pytest.raises(CommandError, match="Ready=False ServiceAccountNotPermitted: not allowed"):
        run_renew(Renewal(policy(), controller))


def test_renew_times_out_naming_the_last_failure() -> None:
    def controller(fake: Renewal, value: str) -> None:
        fake.status(
            {
                "failedAttempts": 1,
                "lastFailureTime": at(0),
                "conditions": [ready("True", "RotationFailed", "Secret oidc-client not found")],
            }
        )

    with pytest.raises(CommandError) as failed:
        run_renew(Renewal(policy(), controller), timeout=5)
    assert str(failed.value) == (
        "timed out after 5.0 s waiting for backendsecuritypolicy/sa in namespace team-a to serve "
        "a new credential; last failure: Ready=True RotationFailed: Secret oidc-client "
        "not found"
    )


def test_renew_refuses_copied_credentials_without_touching_the_policy() -> None:
    copied = policy()
    copied["spec"] = {"type": "APIKey", "apiKey": {"secretRef": {"name": "k"}}}
    fake = Renewal(copied, lambda fake, value: None)
    with pytest.raises(CommandError, match="copies its credential from a Secret"):
        run_renew(fake)
    assert fake.api.writes == []


def test_a_missing_policy_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = memapi.MemAPI()  # holds no policy: NotFound
    monkeypatch.setattr(target, "connect", lambda words, **kw: target.Target(empty, "ns", "x"))
    err = io.StringIO()
    args = cli.build_parser().parse_args(["status", "bsp/x"])
    assert entry.run(args, out=io.StringIO(), err=err) == 1
    assert err.getvalue() == 'rotator: backendsecuritypolicy "x" not found in namespace "ns"\n'

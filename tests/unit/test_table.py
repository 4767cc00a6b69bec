"""The live table of ``rotator dev``: readable times whether a renewal is seconds or a day away."""

from __future__ import annotations

from controllers.runtime import clock as clocks
from rotator_devkit.devenv import table

NOW = clocks.parse_rfc3339("2026-11-29T12:00:00Z")


def test_row_shows_times_near_and_far_and_readiness() -> None:
    policy = {
        "metadata": {"namespace": "default", "name": "bedrock-iam-user"},
        "spec": {"type": "AWSCredentials"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "CredentialsReady"},
            ],
            "renewalTime": "2026-11-30T13:07:08Z",
            "lastRotationTime": "2026-11-29T11:59:35Z",
        },
    }
    assert table.row(policy, NOW) == (
        "default/bedrock-iam-user",
        "AWSCredentials",
        "True CredentialsReady",
        "-",
        "2026-11-30 13:07 (in 25h)",
        "11:59:35 (25s ago)",
    )


def test_render_lists_every_policy_under_the_columns() -> None:
    policies = [
        {"metadata": {"namespace": "b", "name": "two"}, "spec": {"type": "APIKey"}},
        {"metadata": {"namespace": "a", "name": "one"}, "spec": {"type": "APIKey"}},
    ]
    title, header, *lines = table.render(policies, NOW).strip().splitlines()
    assert title.startswith("── policies at 12:00:00 UTC")
    assert header.split() == [
        "POLICY",
        "TYPE",
        "READY",
        "EXPIRES",
        "NEXT",
        "RENEWAL",
        "LAST",
        "ROTATION",
    ]
    assert [line.split()[0] for line in lines] == ["a/one", "b/two"]

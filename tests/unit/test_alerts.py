"""rotator's alerts and dashboard, checked by Prometheus's own promtool (built from its Go module by
hack/promtool.sh): the chart's rules pass their unit tests (tests/alerts/rotator.test.yaml), which
make every alert fire and stay quiet; each alert has a severity, a summary and a runbook section in
docs/operations.md; every PromQL expression of the rules and the dashboard parses. That each metric
they name is exported is tests/e2e/test_dashboard_metrics.py's job (a real scrape)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.runtime.ratelimiters import ItemExponentialFailureRateLimiter
from tests.support import helm, monitoring
from tests.support.helm import Case

SEVERITIES = {"critical", "warning"}
# Whichever test runs first builds promtool (hack/promtool.sh: 2.5 to 4 min cold on 2 cores, more
# beside make test's other workers); cached after that (milliseconds).
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    return monitoring.rendered_rules()


def run_unit_tests(rules: dict[str, Any], folder: Path) -> str:
    """``promtool test rules`` of tests/alerts against ``rules``; promtool's output, or fails."""
    (folder / "rules.yaml").write_text(yaml.safe_dump(rules))
    (folder / "rotator.test.yaml").write_text(monitoring.ALERT_TESTS.read_text())
    out = monitoring.run_promtool("test", "rules", str(folder / "rotator.test.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_rules_pass_promtool_check_and_their_unit_tests(
    rules: dict[str, Any], tmp_path: Path
) -> None:
    """Each alert firing at the time it should, with its labels and annotations, and quiet when
    it should be. Mutation-tested, each failing here: RotatorCredentialExpiringSoon's `< 300` as
    `< 200` and its `for: 2m` as `for: 1m`; RotatorRefreshesFailing's `[10m]` as `[20m]` (still
    firing at 41 min) and without its job matcher (another scrape's failures fire);
    RotatorReconcileErrors as `rate(...[5m]) > 0` for 15m (the object failing on the retry
    schedule never fires), without its `offset 20m` part (the conflict storm fires), and without
    its job matcher (another operator's errors fire); RotatorNoLeader's `max` as `min` (fires with one leader of two) and
    its `absent(up ...)` part removed (no replica scraped: quiet); RotatorRouteRolloutPending's
    `for: 15m` as `for: 10m`, and without its `max by` (a leader handover restarts the wait)."""
    (tmp_path / "check.yaml").write_text(yaml.safe_dump(rules))
    checked = monitoring.run_promtool("check", "rules", str(tmp_path / "check.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in run_unit_tests(rules, tmp_path)


def test_the_retry_schedule_case_follows_the_rate_limiter() -> None:
    """The reconcile-error counter of the case "one object failing on the retry schedule" is what
    one object retried by ItemExponentialFailureRateLimiter's defaults (5 ms doubling to 1000 s),
    failing from minute 5 on, gives at each 1 min scrape. Broken by a value edited by hand, or by
    the defaults changing (then the alert's 20 min windows may need to follow the cap)."""
    limiter = ItemExponentialFailureRateLimiter[str]()
    errors = [0.0]  # seconds after the first failure
    while errors[-1] < 100 * 60:
        errors.append(errors[-1] + limiter.when("policy"))
    assert limiter.when("policy") == 1000.0 < 20 * 60, "the cap fits in the alert's 20 min window"
    expected = [
        sum(1 for e in errors if e <= (minute - 5) * 60) if minute >= 5 else 0
        for minute in range(100)
    ]
    tests = yaml.safe_load(monitoring.ALERT_TESTS.read_text())["tests"]
    case = next(t for t in tests if t["name"].startswith("one object failing on the retry"))
    [series] = case["input_series"]
    assert [int(v) for v in series["values"].split()] == expected


def test_the_unit_tests_can_fail(rules: dict[str, Any], tmp_path: Path) -> None:
    """The same unit tests against rules with the expiry threshold halved: promtool says FAILED
    (so the test above is not passing for want of cases)."""
    broken = yaml.safe_load(yaml.safe_dump(rules))
    expiring = next(r for r in monitoring.alerts(broken) if r["alert"].endswith("ExpiringSoon"))
    expiring["expr"] = expiring["expr"].replace("< 300", "< 150")
    with pytest.raises(AssertionError, match="FAILED"):
        run_unit_tests(broken, tmp_path)


def test_every_alert_has_a_firing_case_and_a_quiet_one(rules: dict[str, Any]) -> None:
    """Broken by a case removed from tests/alerts/rotator.test.yaml (all of RotatorNoLeader's
    firing cases) or by a new alert without cases."""
    tests = yaml.safe_load(monitoring.ALERT_TESTS.read_text())["tests"]
    cases = [c for t in tests for c in t.get("alert_rule_test", [])]
    names = {r["alert"] for r in monitoring.alerts(rules)}
    assert names, "the chart renders alerts"
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert names - firing == set(), "alerts never made to fire"
    assert names - quiet == set(), "alerts never checked quiet"
    assert {c["alertname"] for c in cases} <= names, "cases of alerts that do not exist"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section(rules: dict[str, Any]) -> None:
    """Broken by an alert's runbook_url naming a heading docs/operations.md lacks (a section
    renamed), or a severity outside critical and warning."""
    anchors = monitoring.operations_anchors()
    for rule in monitoring.alerts(rules):
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md", name
        assert anchor == name.lower(), f"{name}: the runbook section is named after the alert"
        assert anchor in anchors, f"{name}: docs/operations.md has no section #{anchor}"


def test_the_selector_and_runbook_url_values_reach_every_rule() -> None:
    """Broken by a matcher in files/prometheus-rules.yaml spelt other than the default job one
    (the template's replace would miss it), or by the template ignoring runbookURL."""
    default_job = 'job="rotator-controller-manager-metrics-service"'
    renders = helm.template_all(
        {
            "set": Case(
                {
                    "metrics": {
                        "prometheusRule": {
                            "enabled": True,
                            "selector": 'job="rotator", namespace="ops"',
                            "runbookURL": "https://docs.example/rotator/v0.1.0/",
                        }
                    }
                }
            ),
            "other release": Case(
                {"metrics": {"prometheusRule": {"enabled": True}}}, release="ops"
            ),
        }
    )
    changed = monitoring.alerts(renders["set"].one("PrometheusRule")["spec"])
    for rule in changed:
        matchers = re.findall(r"\{([^}]*)\}", rule["expr"])
        assert matchers, rule["alert"]
        for matcher in matchers:
            assert matcher.startswith('job="rotator", namespace="ops"'), (rule["alert"], matcher)
        assert rule["annotations"]["runbook_url"].startswith(
            "https://docs.example/rotator/v0.1.0/docs/operations.md#"
        )
    other = monitoring.alerts(renders["other release"].one("PrometheusRule")["spec"])
    for rule in other:
        assert default_job not in rule["expr"]
        assert 'job="ops-rotator-controller-manager-metrics-service"' in rule["expr"]


def test_every_promql_expression_of_the_dashboard_parses(tmp_path: Path) -> None:
    """Each panel's PromQL (Grafana's variables replaced) as a recording rule that
    ``promtool check rules`` parses. Broken by a parenthesis dropped from a panel's expression."""
    exprs = [monitoring.substituted(e) for e in monitoring.dashboard_exprs()]
    assert len(exprs) >= 10
    assert not [e for e in exprs if "$" in e], "every variable is replaced"
    (tmp_path / "dashboard.yaml").write_text(monitoring.as_rule_file(exprs))
    out = monitoring.run_promtool("check", "rules", str(tmp_path / "dashboard.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_a_promql_expression_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    """The check above can fail: a panel's expression with a parenthesis dropped."""
    expr = monitoring.substituted(monitoring.dashboard_exprs()[0])
    (tmp_path / "broken.yaml").write_text(monitoring.as_rule_file([expr[:-1]]))
    out = monitoring.run_promtool("check", "rules", str(tmp_path / "broken.yaml"))
    assert out.returncode != 0
    assert "parse error" in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sort(a_seconds{job=~"x"} - time())', {"a_seconds"}),
        (
            'histogram_quantile(0.99, sum by (controller, le) (rate(b_bucket{j="by (x)"}[5m])))',
            {"b_bucket"},
        ),
        (
            'max by (name) (c) < 1 or absent(up{j="1"} == 1) unless on (x) group_left (y) d',
            {"c", "up", "d"},
        ),
        ('increase(e_total{code!~"2[0-9][0-9]"}[10m] offset 5m) > 0', {"e_total"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    """What the e2e scrape test compares with /metrics: names outside functions, matchers,
    ranges, grouping clauses and keywords."""
    assert monitoring.metric_names(expr) == names


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    """Broken by a panel dropped or renamed."""
    titles = {p["title"] for p in monitoring.dashboard()["panels"] if p["type"] != "row"}
    assert {
        "Credentials by time to expiry",
        "Rotations by type and result",
        "Provider calls by provider, call and code",
        "Reconciles by controller and result",
        "Reconcile errors by controller",
        "Queue depth by controller",
        "Leader and shards",
        "Provider call latency by provider, 50th and 99th percentile",
        "Route config writes by format",
        "Rollouts by kind and result",
        "Routes with a rollout pending",
    } <= titles


def test_the_job_variable_lists_rotator_jobs_only_and_picks_none_by_name() -> None:
    """The dashboard's job variable comes from a metric only rotator exports (controller-runtime's
    are every operator's), and its default is All, not a Service name another release name would
    change. Broken by label_values of controller_runtime_reconcile_total, or a job as default."""
    [job] = [v for v in monitoring.dashboard()["templating"]["list"] if v["name"] == "job"]
    assert monitoring.variable_metrics({"templating": {"list": [job]}}) == {
        "rotator_events_dropped_total"
    }
    assert job["includeAll"] is True
    assert job["current"]["value"] == "$__all"
    assert job["allValue"] == ".+"

"""A Route with ``spec.output.format: LiteLLM`` renders a LiteLLM proxy ``model_list``: model
names from its matches, priorities as orders, weights as weights, each credential the way its
provider sends it; what LiteLLM cannot express is named in ``Translated``, never dropped in
silence. A Route without the field keeps rotator's own format, byte for byte."""

from __future__ import annotations

import base64
from typing import Any, cast

import pytest
import yaml

from controllers.reconcilers import api, litellmconfig, routeconfig
from tests.unit.test_route_reconciler import NS, World

SECRET = "sk-never-in-status-0123"

AWS_FILE = (
    "[default]\naws_access_key_id = AKIATEST\naws_secret_access_key = s3cr3t-never-shown\n"
    "aws_session_token = tok-never-shown\nregion = us-east-1\n"
)


def backend(
    name: str,
    schema: str = "OpenAI",
    credentials: routeconfig.ResolvedCredentials | None = None,
    **endpoint: Any,
) -> routeconfig.ResolvedBackend:
    spec: Any = {"schema": schema, "endpoint": {"host": f"{name}.example", "port": 443, **endpoint}}
    return routeconfig.ResolvedBackend(name, spec, credentials)


def key(value: str = SECRET, header: str | None = None) -> routeconfig.ResolvedCredentials:
    h = None if header is None else routeconfig.CredentialHeader(header, routeconfig.RAW)
    return routeconfig.ResolvedCredentials("p", "APIKey", {"apiKey": value}, None, header=h)


def route(rules: list[dict[str, Any]], output: str | None = "LiteLLM") -> api.Route:
    spec: dict[str, Any] = {"rules": rules}
    if output is not None:
        spec["output"] = {"format": output}
    md = {"name": "r", "namespace": NS, "uid": "u", "generation": 1}
    return cast(
        api.Route, {"apiVersion": api.API_VERSION, "kind": "Route", "metadata": md, "spec": spec}
    )


def refs(*entries: tuple[str, int, int]) -> list[dict[str, Any]]:
    return [{"name": n, "weight": w, "priority": p} for n, w, p in entries]


def test_priorities_become_orders_and_weights_stay_weights() -> None:
    r = route(
        [
            {
                "matches": [{"modelName": "gpt-4o"}],
                "backendRefs": refs(("a", 3, 0), ("b", 1, 0), ("c", 1, 1)),
            }
        ]
    )
    config, gaps = litellmconfig.build(r, {n: backend(n, credentials=key()) for n in "abc"})
    assert gaps == []
    assert [
        (
            m["model_name"],
            m["litellm_params"]["model"],
            m["litellm_params"]["weight"],
            m["litellm_params"]["order"],
        )
        for m in config["model_list"]
    ] == [
        ("gpt-4o", "openai/gpt-4o", 3, 1),
        ("gpt-4o", "openai/gpt-4o", 1, 1),
        ("gpt-4o", "openai/gpt-4o", 1, 2),
    ]
    assert config["model_list"][0]["litellm_params"]["api_base"] == "https://a.example:443/v1"
    assert config["model_list"][0]["litellm_params"]["api_key"] == SECRET
    assert len({m["model_info"]["id"] for m in config["model_list"]}) == 3


def test_a_rule_without_matches_takes_every_model_and_the_first_rule_to_name_a_model_wins() -> None:
    r = route(
        [
            {"matches": [{"modelName": "m"}], "backendRefs": refs(("a", 1, 0))},
            {"matches": [{"modelName": "m"}, {"modelName": "n"}], "backendRefs": refs(("b", 1, 0))},
            {"backendRefs": refs(("c", 1, 0))},
        ]
    )
    config, gaps = litellmconfig.build(r, {n: backend(n) for n in "abc"})
    assert gaps == []
    assert [
        (m["model_name"], m["model_info"]["id"].split("/")[-1]) for m in config["model_list"]
    ] == [
        ("m", "a"),
        ("n", "b"),
        ("*", "c"),
    ]
    assert config["model_list"][2]["litellm_params"]["model"] == "openai/*"


def test_a_backend_of_weight_zero_and_one_that_did_not_resolve_are_left_out_without_a_gap() -> None:
    r = route(
        [
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(("a", 0, 0), ("gone", 1, 0), ("b", 1, 0)),
            }
        ]
    )
    config, gaps = litellmconfig.build(r, {"a": backend("a"), "b": backend("b")})
    assert gaps == []
    assert [m["model_info"]["id"].split("/")[-1] for m in config["model_list"]] == ["b"]


def test_each_credential_goes_where_its_provider_sends_it() -> None:
    azure_token = routeconfig.ResolvedCredentials(
        "p", "AzureCredentials", {"azureAccessToken": "aad"}, "2026-01-01T00:00:00Z"
    )
    aws = routeconfig.ResolvedCredentials(
        "p", "AWSCredentials", {"credentials": AWS_FILE}, "2026-01-01T00:00:00Z"
    )
    r = route(
        [
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(("az", 1, 0), ("azk", 1, 0), ("br", 1, 0), ("an", 1, 0)),
            }
        ]
    )
    config, gaps = litellmconfig.build(
        r,
        {
            "az": backend("az", "AzureOpenAI", azure_token),
            "azk": backend("azk", "AzureOpenAI", key(header="api-key")),
            "br": backend("br", "AWSBedrock", aws, tls={"enabled": False}, port=8080),
            "an": backend("an", "Anthropic", key(header="x-api-key")),
        },
    )
    assert gaps == []
    params = {
        m["model_info"]["id"].split("/")[-1]: m["litellm_params"] for m in config["model_list"]
    }
    assert params["az"]["model"] == "azure/m"
    assert params["az"]["azure_ad_token"] == "aad"
    assert params["azk"]["api_key"] == SECRET
    assert "azure_ad_token" not in params["azk"]
    assert {k: v for k, v in params["br"].items() if k.startswith("aws")} == {
        "aws_bedrock_runtime_endpoint": "http://br.example:8080",
        "aws_access_key_id": "AKIATEST",
        "aws_secret_access_key": "s3cr3t-never-shown",
        "aws_session_token": "tok-never-shown",
        "aws_region_name": "us-east-1",
    }
    assert params["an"]["model"] == "anthropic/m"
    assert params["an"]["api_key"] == SECRET


def test_what_litellm_cannot_express_is_named_with_its_backend_and_never_its_value() -> None:
    gcp = routeconfig.ResolvedCredentials("p", "GCPCredentials", {"gcpAccessToken": SECRET}, None)
    r = route(
        [
            {"matches": [{"pathPrefix": "/v1/embeddings"}], "backendRefs": refs(("a", 1, 0))},
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(("hdr", 1, 0), ("vx", 1, 0), ("aws", 1, 0)),
            },
        ]
    )
    aws = routeconfig.ResolvedCredentials("p", "AWSCredentials", {"credentials": AWS_FILE}, None)
    config, gaps = litellmconfig.build(
        r,
        {
            "a": backend("a"),
            "hdr": backend("hdr", credentials=key(header="x-api-key")),
            "vx": backend("vx", "GCPAnthropic", gcp),
            "aws": backend("aws", credentials=aws),
        },
    )
    assert config["model_list"] == []
    text = [str(g) for g in gaps]
    assert text[0].startswith("rule 0: pathPrefix /v1/embeddings")
    assert [(g.rule, g.backend) for g in gaps[1:]] == [(1, "hdr"), (1, "vx"), (1, "aws")]
    assert "x-api-key" in text[1]
    assert "GCPAnthropic" in text[2]
    assert "AWSCredentials" in text[3]
    assert not any(s in " ".join(text) for s in (SECRET, "s3cr3t", "tok-never"))


def gcp(
    token: str = SECRET, project: str = "my-project", region: str = "us-central1"
) -> routeconfig.ResolvedCredentials:
    return routeconfig.ResolvedCredentials(
        "p",
        "GCPCredentials",
        {"gcpAccessToken": token},
        "2026-01-01T00:00:00Z",
        gcp=routeconfig.GCPLocation(project, region),
    )


def test_a_vertex_ai_backend_is_its_openai_compatible_endpoint_with_the_minted_token() -> None:
    r = route(
        [
            {"matches": [{"modelName": "gemini-2.0-flash"}], "backendRefs": refs(("vx", 1, 0))},
            {"backendRefs": refs(("vx", 2, 1))},
        ]
    )
    config, gaps = litellmconfig.build(r, {"vx": backend("vx", "GCPVertexAI", gcp())})
    assert gaps == []
    exact, wildcard = (m["litellm_params"] for m in config["model_list"])
    assert exact == {
        "model": "openai/google/gemini-2.0-flash",
        "api_base": "https://vx.example:443/v1/projects/my-project/locations/us-central1"
        "/endpoints/openapi",
        "api_key": SECRET,
        "weight": 1,
        "order": 1,
    }
    # LiteLLM's wildcard puts the model asked for where the * is: google/<model>
    assert (wildcard["model"], wildcard["weight"], wildcard["order"]) == ("openai/google/*", 2, 2)


@pytest.mark.parametrize(
    ("project", "region", "field"),
    [
        ("../../v1/projects/other", "us-central1", "projectName"),
        ("my-project/locations/x", "us-central1", "projectName"),
        ("my-project?alt=x", "us-central1", "projectName"),
        ("my%2fproject", "us-central1", "projectName"),
        ("My-Project", "us-central1", "projectName"),
        ("p" * (1 << 20), "us-central1", "projectName"),
        ("", "us-central1", "projectName"),
        ("a..b:my-project", "us-central1", "projectName"),
        ("my-project", "us-central1/../../x", "region"),
        ("my-project", "", "region"),
        ("my-project", "r" * (1 << 20), "region"),
    ],
)
def test_a_vertex_ai_project_or_region_that_is_not_one_is_a_gap_that_never_quotes_it(
    project: str, region: str, field: str
) -> None:
    r = route([{"matches": [{"modelName": "m"}], "backendRefs": refs(("vx", 1, 0))}])
    creds = gcp(project=project, region=region)
    config, gaps = litellmconfig.build(r, {"vx": backend("vx", "GCPVertexAI", creds)})
    assert config["model_list"] == []
    assert [(g.rule, g.backend) for g in gaps] == [(0, "vx")]
    text = str(gaps[0])
    assert f"gcpCredentials.{field}" in text
    assert len(text) < 300
    value = project if field == "projectName" else region
    assert not value or value not in text


@pytest.mark.parametrize("project", ["example.com:my-project", "123456789012"])
def test_a_domain_scoped_project_id_and_a_project_number_name_a_project(project: str) -> None:
    r = route([{"matches": [{"modelName": "m"}], "backendRefs": refs(("vx", 1, 0))}])
    creds = gcp(project=project, region="global")
    config, gaps = litellmconfig.build(r, {"vx": backend("vx", "GCPVertexAI", creds)})
    assert gaps == []
    assert config["model_list"][0]["litellm_params"]["api_base"].endswith(
        f"/v1/projects/{project}/locations/global/endpoints/openapi"
    )


def test_a_vertex_ai_backend_takes_a_google_token_only_and_never_the_proxys_own() -> None:
    r = route(
        [
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(("key", 1, 0), ("none", 1, 0), ("empty", 1, 0)),
            }
        ]
    )
    config, gaps = litellmconfig.build(
        r,
        {
            "key": backend("key", "GCPVertexAI", key()),
            "none": backend("none", "GCPVertexAI"),
            "empty": backend("empty", "GCPVertexAI", gcp(token="")),
        },
    )
    assert config["model_list"] == []
    by_backend = {g.backend: str(g) for g in gaps}
    assert "credential type APIKey" in by_backend["key"]
    assert "no credential" in by_backend["none"]
    assert "data.gcpAccessToken is empty" in by_backend["empty"]
    assert SECRET not in " ".join(by_backend.values())


@pytest.mark.parametrize("changed", [{"project": "other-project"}, {"region": "europe-west4"}])
def test_the_vertex_ai_project_and_region_are_in_the_litellm_digest_only(
    changed: dict[str, str],
) -> None:
    r = route([{"matches": [{"modelName": "m"}], "backendRefs": refs(("vx", 1, 0))}])
    here = {"vx": backend("vx", "GCPVertexAI", gcp())}
    there = {"vx": backend("vx", "GCPVertexAI", gcp(**changed))}
    assert litellmconfig.inputs_digest(r, here) != litellmconfig.inputs_digest(r, there)
    # rotator's own format renders neither: its digest (and so an upgrade) is unchanged
    assert routeconfig.inputs_digest(r, here) == routeconfig.inputs_digest(r, there)


def test_a_gcp_policy_spec_gives_its_project_and_region_and_no_other_type_does() -> None:
    spec = {"type": "GCPCredentials", "gcpCredentials": {"projectName": "p1", "region": "r1"}}
    assert routeconfig.gcp_location(spec) == routeconfig.GCPLocation("p1", "r1")
    assert routeconfig.gcp_location({"type": "APIKey", "apiKey": {}}) is None
    assert routeconfig.gcp_location({"type": "APIKey", "gcpCredentials": spec}) is None


def test_the_yaml_is_what_the_proxy_loads_and_the_same_inputs_give_the_same_bytes() -> None:
    r = route([{"matches": [{"modelName": "m"}], "backendRefs": refs(("a", 1, 0))}])
    first = litellmconfig.render(r, {"a": backend("a", credentials=key())})
    assert first == litellmconfig.render(r, {"a": backend("a", credentials=key())})
    loaded = yaml.safe_load(first)
    assert set(loaded) == {"model_list", "router_settings"}
    assert loaded["model_list"][0]["litellm_params"]["api_key"] == SECRET
    assert litellmconfig.inputs_digest(r, {}) != routeconfig.inputs_digest(r, {})


# --- through the Route reconciler ---------------------------------------------------------------


def litellm_world(world: World, output: str | None) -> None:
    world.chain("a", {"apiKey": SECRET.encode()})
    world.route("a")
    r = world.api.stored(api.ROUTES, NS, "r") or {}
    spec = dict(r["spec"])
    if output is not None:
        spec["output"] = {"format": output}
    world.edit(api.ROUTES, "r", spec=spec)


DEFAULT_CONFIG_HASH = "30778cf4452f427b909b787d1471c51fe4c163493ad9abbce76837f0aef4e3ab"
"""The ``config-hash`` rotator wrote for :func:`litellm_world`'s Route before ``spec.output``
existed (computed with the code of git HEAD before this change): it must not change."""


@pytest.mark.parametrize("output", [None, "rotator.dev/v1alpha1"])
def test_the_default_format_keeps_its_bytes_and_hash(output: str | None) -> None:
    world = World()
    litellm_world(world, output)
    world.reconcile()
    secret = world.secrets()[-1]
    assert secret["metadata"]["annotations"][api.CONFIG_HASH_ANNOTATION] == DEFAULT_CONFIG_HASH
    assert world.config()["apiVersion"] == routeconfig.FORMAT_VERSION
    assert api.TRANSLATED not in {c["type"] for c in world.statuses()[-1]["conditions"]}


def test_a_vertex_ai_route_takes_the_policys_project_and_region_and_follows_their_change() -> None:
    world = World()
    world.chain("vx", {"gcpAccessToken": SECRET.encode()})
    backend_body = world.api.stored(api.BACKENDS, NS, "vx") or {}
    world.edit(api.BACKENDS, "vx", spec={**backend_body["spec"], "schema": "GCPVertexAI"})
    gcp_spec = {"projectName": "my-project", "region": "us-central1", "controllerIdentity": {}}
    policy = world.api.stored(api.POLICIES, NS, "p-vx") or {}
    spec = {**policy["spec"], "type": "GCPCredentials", "gcpCredentials": gcp_spec}
    world.edit(api.POLICIES, "p-vx", spec=spec)
    world.route("vx")
    r = world.api.stored(api.ROUTES, NS, "r") or {}
    world.edit(api.ROUTES, "r", spec={**r["spec"], "output": {"format": "LiteLLM"}})
    world.reconcile()
    params = world.config()["model_list"][0]["litellm_params"]
    assert "/v1/projects/my-project/locations/us-central1/" in params["api_base"]
    assert params["api_key"] == SECRET
    assert world.condition(api.TRANSLATED)["status"] == "True"
    # the region changes (a new policy generation): the configuration follows
    spec = {**spec, "gcpCredentials": {**gcp_spec, "region": "europe-west4"}}
    world.edit(api.POLICIES, "p-vx", spec=spec)
    world.reconcile()
    params = world.config()["model_list"][0]["litellm_params"]
    assert "/v1/projects/my-project/locations/europe-west4/" in params["api_base"]


def test_a_litellm_route_is_written_as_a_model_list_and_reports_translated() -> None:
    world = World()
    litellm_world(world, "LiteLLM")
    world.reconcile()
    config = world.config()
    assert config["model_list"][0]["litellm_params"]["api_key"] == SECRET
    cond = world.condition(api.TRANSLATED)
    assert (cond["status"], cond["reason"]) == ("True", api.REASON_TRANSLATED)
    writes = len(world.api.writes)
    world.restart()
    world.reconcile()  # a restart: inputs unchanged, nothing rendered or written
    assert len(world.api.writes) == writes


def test_a_gap_turns_translated_false_and_going_back_to_the_default_drops_the_condition() -> None:
    world = World()
    litellm_world(world, "LiteLLM")
    r = world.api.stored(api.ROUTES, NS, "r") or {}
    rules = [{"matches": [{"pathPrefix": "/x"}], "backendRefs": refs(("a", 1, 0))}]
    world.edit(api.ROUTES, "r", spec={**r["spec"], "rules": rules})
    world.reconcile()
    cond = world.condition(api.TRANSLATED)
    assert (cond["status"], cond["reason"]) == ("False", api.REASON_NOT_EXPRESSIBLE)
    assert "pathPrefix /x" in cond["message"]
    assert SECRET not in cond["message"]
    r = world.api.stored(api.ROUTES, NS, "r") or {}
    world.edit(api.ROUTES, "r", spec={k: v for k, v in r["spec"].items() if k != "output"})
    world.reconcile()
    assert api.TRANSLATED not in {c["type"] for c in world.statuses()[-1]["conditions"]}
    assert base64.b64decode(world.secrets()[-1]["data"][api.ROUTE_CONFIG_KEY]).startswith(
        b"apiVersion"
    )


# --- hostile input: what a tenant's Secret or spec could make the proxy do ----------------------


@pytest.mark.parametrize("prefix", litellmconfig.SECRET_REFERENCES)
def test_a_copied_value_litellm_would_read_as_a_secret_reference_leaves_its_backend_out(
    prefix: str,
) -> None:
    """A tenant's ``apiKey: os.environ/LITELLM_MASTER_KEY`` would make the proxy send its own
    master key to the tenant's host (LiteLLM resolves the reference as it loads the file)."""
    probe = f"{prefix}LITELLM_MASTER_KEY"
    azure = routeconfig.ResolvedCredentials(
        "p", "AzureCredentials", {"azureAccessToken": probe}, None
    )
    aws_file = AWS_FILE.replace("s3cr3t-never-shown", f" {probe}")
    aws = routeconfig.ResolvedCredentials("p", "AWSCredentials", {"credentials": aws_file}, None)
    r = route(
        [
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(("oa", 1, 0), ("az", 1, 0), ("br", 1, 0), ("ok", 1, 0)),
            }
        ]
    )
    config, gaps = litellmconfig.build(
        r,
        {
            "oa": backend("oa", credentials=key(probe)),
            "az": backend("az", "AzureOpenAI", azure),
            "br": backend("br", "AWSBedrock", aws),
            "ok": backend("ok", credentials=key()),
        },
    )
    assert [m["model_info"]["id"].split("/")[-1] for m in config["model_list"]] == ["ok"]
    assert [(g.rule, g.backend) for g in gaps] == [(0, "oa"), (0, "az"), (0, "br")]
    text = " ".join(str(g) for g in gaps)
    for param in ("api_key", "azure_ad_token", "aws_secret_access_key"):
        assert param in text
    assert "LITELLM_MASTER_KEY" not in text
    assert probe not in litellmconfig.render(r, {"oa": backend("oa", credentials=key(probe))})


def test_a_model_name_litellm_would_read_as_a_reference_or_a_pattern_is_a_gap() -> None:
    r = route(
        [
            {
                "matches": [
                    {"modelName": "os.environ/LITELLM_MASTER_KEY"},
                    {"modelName": "gpt-*"},
                    {"modelName": "m"},
                ],
                "backendRefs": refs(("a", 1, 0)),
            }
        ]
    )
    config, gaps = litellmconfig.build(r, {"a": backend("a", credentials=key())})
    assert [m["model_name"] for m in config["model_list"]] == ["m"]
    text = [str(g) for g in gaps]
    assert len(text) == 2
    assert all(t.startswith("rule 0: modelName") for t in text)
    assert "LITELLM_MASTER_KEY" not in text[0]
    assert "gpt-*" in text[1]
    assert "pattern" in text[1]


def test_a_backend_without_a_policy_is_never_sent_the_proxys_own_credentials() -> None:
    """An empty or absent ``api_key`` makes LiteLLM send ``OPENAI_API_KEY`` (and the like) from
    the proxy's environment; a non-empty one stops OpenAI's and Anthropic's fallback, and nothing
    stops Azure's or boto's, so those backends are left out."""
    r = route(
        [
            {
                "matches": [{"modelName": "m"}],
                "backendRefs": refs(
                    ("oa", 1, 0), ("an", 1, 0), ("az", 1, 0), ("br", 1, 0), ("empty", 1, 0)
                ),
            }
        ]
    )
    config, gaps = litellmconfig.build(
        r,
        {
            "oa": backend("oa"),
            "an": backend("an", "Anthropic"),
            "az": backend("az", "AzureOpenAI"),
            "br": backend("br", "AWSBedrock"),
            "empty": backend("empty", credentials=key("")),
        },
    )
    params = {
        m["model_info"]["id"].split("/")[-1]: m["litellm_params"] for m in config["model_list"]
    }
    assert set(params) == {"oa", "an"}
    assert params["oa"]["api_key"] == params["an"]["api_key"] == litellmconfig.NO_CREDENTIAL
    assert [(g.rule, g.backend) for g in gaps] == [(0, "az"), (0, "br"), (0, "empty")]
    assert all("proxy's own credentials" in str(g) for g in gaps)


def test_a_rule_without_matches_hides_every_later_rule() -> None:
    """Rotator's first matching rule wins, so after a rule without matches nothing is reachable;
    in LiteLLM a later exact name would win over the earlier ``"*"``."""
    r = route(
        [
            {"matches": [{"modelName": "m"}], "backendRefs": refs(("a", 1, 0))},
            {"backendRefs": refs(("b", 1, 0))},
            {"matches": [{"modelName": "gpt-4"}], "backendRefs": refs(("c", 1, 0))},
            {"matches": [{"pathPrefix": "/x"}], "backendRefs": refs(("c", 1, 0))},
        ]
    )
    config, gaps = litellmconfig.build(r, {n: backend(n) for n in "abc"})
    assert gaps == []
    assert [
        (m["model_name"], m["model_info"]["id"].split("/")[-1]) for m in config["model_list"]
    ] == [("m", "a"), ("*", "b")]


def test_a_backend_listed_twice_in_a_rule_is_two_deployments_with_two_ids() -> None:
    r = route([{"matches": [{"modelName": "m"}], "backendRefs": refs(("a", 1, 0), ("a", 1, 1))}])
    config, gaps = litellmconfig.build(r, {"a": backend("a", credentials=key())})
    assert gaps == []
    ids = [m["model_info"]["id"] for m in config["model_list"]]
    assert len(ids) == len(set(ids)) == 2
    assert [m["litellm_params"]["order"] for m in config["model_list"]] == [1, 2]

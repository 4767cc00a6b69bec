"""A Route with ``spec.output.format: Envoy`` renders an Envoy proxy's files: routes by model
name and path prefix, weights as cumulative runtime fractions, one cluster per backend with the
credential filter its type takes, and credentials only in their own files, so a rotation leaves
the routing files byte for byte. What Envoy cannot express is a gap, named without its value.
Every configuration here is also checked by the envoy 1.40 binary (``--mode validate``)."""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from controllers.reconcilers import api
from controllers.reconcilers.route import configsecret
from controllers.reconcilers.route.formats import base, envoy
from tests.support import required
from tests.support.atomicwriter import AtomicWriter
from tests.support.envoyproc import EnvoyProcess
from tests.support.polling import wait_for
from tests.unit.test_route_reconciler import NS, World

SECRET = "sk-never-in-routing-0123"
TOKEN = "ya29.token-never-in-routing"
AWS_FILE = (
    "[default]\naws_access_key_id = AKIATEST\naws_secret_access_key = s3cr3t-never-shown\n"
    "aws_session_token = tok-never-shown\nregion = us-east-1\n"
)
ROUTING = (envoy.BOOTSTRAP, envoy.LISTENERS, envoy.CLUSTERS)


def backend(
    name: str,
    schema: str = "OpenAI",
    credentials: base.ResolvedCredentials | None = None,
    **endpoint: Any,
) -> base.ResolvedBackend:
    spec: Any = {"schema": schema, "endpoint": {"host": f"{name}.example", "port": 443, **endpoint}}
    return base.ResolvedBackend(name, spec, credentials)


def key(value: str = SECRET, header: str | None = None) -> base.ResolvedCredentials:
    h = None if header is None else base.CredentialHeader(header, base.RAW)
    return base.ResolvedCredentials("p", "APIKey", {"apiKey": value}, None, header=h)


def token(kind: str, value: str = TOKEN) -> base.ResolvedCredentials:
    data_key = {"AzureCredentials": "azureAccessToken", "GCPCredentials": "gcpAccessToken"}[kind]
    gcp = base.GCPLocation("my-project", "us-central1") if kind == "GCPCredentials" else None
    return base.ResolvedCredentials("p", kind, {data_key: value}, None, gcp=gcp)


def aws(text: str = AWS_FILE) -> base.ResolvedCredentials:
    return base.ResolvedCredentials("p", "AWSCredentials", {"credentials": text}, None)


def route(rules: list[dict[str, Any]], **output: Any) -> api.Route:
    spec: dict[str, Any] = {"rules": rules, "output": {"format": "Envoy", **output}}
    md = {"name": "r", "namespace": NS, "uid": "u", "generation": 1}
    return cast(
        api.Route, {"apiVersion": api.API_VERSION, "kind": "Route", "metadata": md, "spec": spec}
    )


def refs(*entries: tuple[str, int, int]) -> list[dict[str, Any]]:
    return [{"name": n, "weight": w, "priority": p} for n, w, p in entries]


def model(name: str, *backends: tuple[str, int, int]) -> dict[str, Any]:
    return {"matches": [{"modelName": name}], "backendRefs": refs(*backends)}


def routes_of(rendered: base.Rendered) -> list[dict[str, Any]]:
    listener = yaml.safe_load(rendered.files[envoy.LISTENERS])["resources"][0]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return cast(list[dict[str, Any]], manager["route_config"]["virtual_hosts"][0]["routes"])


def clusters_of(rendered: base.Rendered) -> dict[str, dict[str, Any]]:
    found = yaml.safe_load(rendered.files[envoy.CLUSTERS])["resources"]
    return {c["name"]: c for c in found}


def upstream_filters(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    options = cluster["typed_extension_protocol_options"]
    return cast(
        list[dict[str, Any]],
        options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"],
    )


def model_of(r: dict[str, Any]) -> str | None:
    found = r["match"].get("dynamic_metadata")
    return None if not found else cast(str, found[0]["value"]["string_match"]["exact"])


# --- the envoy binary -----------------------------------------------------------------------------


def envoy_binary() -> str | None:
    return shutil.which("envoy") or shutil.which("envoy", path=str(Path(sys.executable).parent))


def validate(rendered: base.Rendered, tmp: Path) -> None:
    """``envoy --mode validate`` of the files with listeners and clusters inlined as static
    resources (validation does not load file-based LDS and CDS, so they are given to it whole),
    in a folder laid out as the kubelet lays out the mounted Secret (``cds.yaml`` reads the
    credential files through ``..data``), as Envoy's working directory would be."""
    binary = envoy_binary()
    if binary is None:
        required.missing("envoy not installed (the dev kit's gateway extra)")
    AtomicWriter(tmp).write({k: v.encode() for k, v in rendered.data().items()})
    static = {
        "node": {"id": "validate", "cluster": "validate"},
        "static_resources": {
            "listeners": yaml.safe_load(rendered.files[envoy.LISTENERS])["resources"],
            "clusters": yaml.safe_load(rendered.files[envoy.CLUSTERS])["resources"],
        },
    }
    for item in [*static["static_resources"]["listeners"], *static["static_resources"]["clusters"]]:
        item.pop("@type")
    (tmp / "static.yaml").write_text(yaml.safe_dump(static))
    for config in ("static.yaml", envoy.BOOTSTRAP):
        result = subprocess.run(
            [binary, "--mode", "validate", "-c", config, "-l", "error"],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


# --- routing ----------------------------------------------------------------------------------------


def test_models_route_in_rule_order_with_weights_as_cumulative_fractions(tmp_path: Path) -> None:
    r = route(
        [
            model("gpt-4o", ("a", 3, 0), ("b", 1, 0), ("zero", 0, 0)),
            {"matches": [{"pathPrefix": "/v1/embeddings"}], "backendRefs": refs(("b", 1, 0))},
            {"backendRefs": refs(("a", 1, 0))},
            model("unreachable", ("b", 1, 0)),
        ]
    )
    backends = {n: backend(n, credentials=key()) for n in ("a", "b", "zero")}
    rendered = envoy.render(r, backends)
    assert rendered.gaps == []
    routes = routes_of(rendered)
    assert [(x["name"], model_of(x), x["match"]["prefix"]) for x in routes] == [
        ("rule-0/a", "gpt-4o", "/"),
        ("rule-0/b", "gpt-4o", "/"),
        ("rule-1/b", None, "/v1/embeddings"),
        ("rule-2/a", None, "/"),
    ]
    fraction = routes[0]["match"]["runtime_fraction"]["default_value"]
    assert (fraction["numerator"], fraction["denominator"]) == (750_000, "MILLION")
    assert "runtime_fraction" not in routes[1]["match"]  # the rest of the draw
    assert sorted(clusters_of(rendered)) == ["a", "b"]  # weight 0: no cluster, no traffic
    validate(rendered, tmp_path)


def test_three_equal_weights_split_the_draw_in_thirds() -> None:
    r = route([model("m", ("a", 1, 0), ("b", 1, 0), ("c", 1, 0))])
    routes = routes_of(envoy.render(r, {n: backend(n, credentials=key()) for n in "abc"}))
    numerators = [
        x["match"].get("runtime_fraction", {}).get("default_value", {}).get("numerator")
        for x in routes
    ]
    assert numerators == [333_333, 666_666, None]


def test_a_match_with_no_backend_left_answers_503_instead_of_falling_through() -> None:
    r = route([model("gpt-4o", ("missing", 1, 0)), {"backendRefs": refs(("a", 1, 0))}])
    routes = routes_of(envoy.render(r, {"a": backend("a", credentials=key())}))
    assert routes[0]["direct_response"]["status"] == 503
    assert model_of(routes[0]) == "gpt-4o"
    assert routes[1]["route"]["cluster"] == "a"


def test_a_higher_priority_is_a_gap_and_the_lowest_reachable_one_is_rendered() -> None:
    r = route([model("m", ("a", 1, 0), ("b", 1, 1), ("c", 1, 2))])
    backends = {
        "a": backend("a", "GCPAnthropic", credentials=token("GCPCredentials")),  # unreachable
        "b": backend("b", credentials=key()),
        "c": backend("c", credentials=key()),
    }
    rendered = envoy.render(r, backends)
    assert [x["route"]["cluster"] for x in routes_of(rendered)] == ["b"]
    assert [(g.backend, g.what.split(":")[0]) for g in rendered.gaps] == [
        ("a", "schema GCPAnthropic"),
        ("c", "priority 2"),
    ]


# --- each backend type --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "credentials", "header", "value", "root"),
    [
        ("OpenAI", key(), "Authorization", f"Bearer {SECRET}", None),
        ("Anthropic", key(header="x-api-key"), "x-api-key", SECRET, None),
        ("AzureOpenAI", key(header="api-key"), "api-key", SECRET, "/openai/v1/"),
        (
            "AzureOpenAI",
            token("AzureCredentials"),
            "Authorization",
            f"Bearer {TOKEN}",
            "/openai/v1/",
        ),
        (
            "GCPVertexAI",
            token("GCPCredentials"),
            "Authorization",
            f"Bearer {TOKEN}",
            "/v1/projects/my-project/locations/us-central1/endpoints/openapi/",
        ),
    ],
)
def test_a_header_credential_is_injected_from_its_own_file_and_the_path_is_the_types(
    schema: str,
    credentials: base.ResolvedCredentials,
    header: str,
    value: str,
    root: str | None,
    tmp_path: Path,
) -> None:
    r = route([model("google/gemini" if schema == "GCPVertexAI" else "m", ("x", 1, 0))])
    rendered = envoy.render(r, {"x": backend("x", schema, credentials)})
    assert rendered.gaps == []
    (action,) = [x["route"] for x in routes_of(rendered)]
    assert action.get("regex_rewrite", {}).get("substitution") == root
    assert action["host_rewrite_literal"] == "x.example"
    injector = upstream_filters(clusters_of(rendered)["x"])[0]["typed_config"]
    generic = injector["credential"]["typed_config"]
    assert (generic["header"], injector["overwrite"]) == (header, True)
    path = generic["credential"]["sds_config"]["path_config_source"]["path"]
    assert path == "..data/sds-x.yaml"  # the version the swap published (its link may come later)
    sds = yaml.safe_load(rendered.files["sds-x.yaml"])["resources"][0]
    assert sds["generic_secret"]["secret"]["inline_string"] == value
    validate(rendered, tmp_path)


def test_aws_session_credentials_sign_with_sigv4_from_their_file_and_nothing_else(
    tmp_path: Path,
) -> None:
    r = route([model("claude", ("br", 1, 0))])
    rendered = envoy.render(r, {"br": backend("br", "AWSBedrock", aws())})
    assert rendered.gaps == []
    signing = upstream_filters(clusters_of(rendered)["br"])[0]["typed_config"]
    assert (signing["service_name"], signing["region"]) == ("bedrock", "us-east-1")
    provider = signing["credential_provider"]
    assert provider["custom_credential_provider_chain"] is True  # never Envoy's own identity
    source = provider["credentials_file_provider"]["credentials_data_source"]
    assert source == {"filename": "..data/aws-br.credentials", "watched_directory": {"path": "."}}
    assert rendered.files["aws-br.credentials"] == (
        "[default]\naws_access_key_id = AKIATEST\naws_secret_access_key = s3cr3t-never-shown\n"
        "aws_session_token = tok-never-shown\n"
    )
    (action,) = [x["route"] for x in routes_of(rendered)]
    assert action["regex_rewrite"]["substitution"] == "/openai/v1/"
    validate(rendered, tmp_path)


def test_tls_is_verified_against_the_ca_file_and_the_servers_name(tmp_path: Path) -> None:
    backends = {
        "named": backend("named", credentials=key()),
        "sni": backend("sni", credentials=key(), tls={"enabled": True, "sni": "api.example"}),
        "ip": backend("ip", credentials=key(), host="192.0.2.7"),
        "plain": backend("plain", credentials=key(), port=8080, tls={"enabled": False}),
    }
    r = route([model(n, (n, 1, 0)) for n in backends])
    rendered = envoy.render(r, backends)
    clusters = clusters_of(rendered)

    def tls(name: str) -> dict[str, Any]:
        return cast(dict[str, Any], clusters[name]["transport_socket"]["typed_config"])

    assert tls("named")["sni"] == "named.example"
    context = tls("named")["common_tls_context"]["validation_context"]
    assert context["trusted_ca"] == {"filename": envoy.CA_FILE}
    assert context["match_typed_subject_alt_names"] == [
        {"san_type": "DNS", "matcher": {"exact": "named.example"}}
    ]
    assert tls("sni")["sni"] == "api.example"
    assert "sni" not in tls("ip")
    assert tls("ip")["common_tls_context"]["validation_context"][
        "match_typed_subject_alt_names"
    ] == [{"san_type": "IP_ADDRESS", "matcher": {"exact": "192.0.2.7"}}]
    assert "transport_socket" not in clusters["plain"]
    assert (clusters["ip"]["type"], clusters["named"]["type"]) == ("STATIC", "LOGICAL_DNS")
    hosts = {x["route"]["cluster"]: x["route"]["host_rewrite_literal"] for x in routes_of(rendered)}
    assert hosts == {
        "named": "named.example",
        "sni": "sni.example",
        "ip": "192.0.2.7",
        "plain": "plain.example:8080",
    }
    validate(rendered, tmp_path)


def test_the_listener_binds_where_the_route_says_and_clients_credentials_are_removed() -> None:
    rendered = envoy.render(
        route([model("m", ("a", 1, 0))], envoy={"address": "127.0.0.1", "port": 18000}),
        {"a": backend("a", credentials=key())},
    )
    listener = yaml.safe_load(rendered.files[envoy.LISTENERS])["resources"][0]
    assert listener["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 18000}
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    removed = manager["route_config"]["virtual_hosts"][0]["request_headers_to_remove"]
    assert {"authorization", "api-key", "x-api-key", "x-amz-security-token"} <= set(removed)
    default = envoy.render(route([model("m", ("a", 1, 0))]), {"a": backend("a", credentials=key())})
    socket = yaml.safe_load(default.files[envoy.LISTENERS])["resources"][0]["address"]
    assert socket["socket_address"] == {"address": "0.0.0.0", "port_value": 10000}


# --- gaps -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "credentials", "model_name", "gap"),
    [
        ("GCPAnthropic", token("GCPCredentials"), "m", "schema GCPAnthropic"),
        ("OpenAI", aws(), "m", "credential type AWSCredentials"),
        ("AWSBedrock", key(), "m", "credential type APIKey"),
        ("AWSBedrock", None, "m", "no credential"),
        (
            "AWSBedrock",
            aws("[default]\naws_access_key_id = A\n"),
            "m",
            "credential type AWSCredentials",
        ),
        ("AWSBedrock", aws("not an ini file"), "m", "credential type AWSCredentials"),
        ("AzureOpenAI", token("GCPCredentials"), "m", "credential type GCPCredentials"),
        (
            "GCPVertexAI",
            token("GCPCredentials"),
            "gemini-2.0-flash",
            "modelName without a publisher",
        ),
        ("GCPVertexAI", None, "google/gemini", "no GCPCredentials policy"),
        ("OpenAI", key(SECRET + "\r\nx-injected: 1"), "m", "credential type APIKey: data.apiKey"),
        ("OpenAI", key(""), "m", "credential type APIKey: data.apiKey"),
        ("OpenAI", key(" padded"), "m", "credential type APIKey: data.apiKey"),
    ],
)
def test_what_envoy_cannot_express_is_a_gap_naming_the_field_never_the_value(
    schema: str, credentials: base.ResolvedCredentials | None, model_name: str, gap: str
) -> None:
    r = route([model(model_name, ("x", 1, 0))])
    rendered = envoy.render(r, {"x": backend("x", schema, credentials)})
    (found,) = rendered.gaps
    assert (found.rule, found.backend) == (0, "x")
    assert found.what.startswith(gap), found.what
    assert SECRET not in found.what
    assert "x-injected" not in found.what
    assert routes_of(rendered)[0]["direct_response"]["status"] == 503
    assert "x" not in clusters_of(rendered)
    assert not [k for k in rendered.files if k.startswith(("sds-", "aws-"))]


@pytest.mark.parametrize(
    ("project", "region"), [("../other", "us-central1"), ("my-project", "a/b")]
)
def test_a_vertex_location_that_cannot_be_a_path_is_a_gap(project: str, region: str) -> None:
    c = base.ResolvedCredentials(
        "p",
        "GCPCredentials",
        {"gcpAccessToken": TOKEN},
        None,
        gcp=base.GCPLocation(project, region),
    )
    rendered = envoy.render(
        route([model("google/g", ("v", 1, 0))]), {"v": backend("v", "GCPVertexAI", c)}
    )
    assert [g.what.split(" ")[0] for g in rendered.gaps] == ["gcpCredentials.projectName"]
    assert project not in str(rendered.gaps[0]) or project == "my-project"


# --- hostile names and values -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "..data", "x" * 300, "UPPER"])
def test_a_backend_name_never_makes_a_path_or_an_invalid_secret_key(name: str) -> None:
    rendered = envoy.render(
        route([model("m", (name, 1, 0))]), {name: backend(name, credentials=key())}
    )
    (sds,) = [k for k in rendered.files if k.startswith("sds-")]
    assert "/" not in sds
    assert ".." not in sds
    assert len(sds) <= 253
    assert all(ch.isalnum() or ch in "-._" for ch in sds)


def test_a_hostile_model_name_stays_one_exact_string() -> None:
    hostile = 'm"\n- name: injected\n  route: {cluster: other}\x00'
    rendered = envoy.render(
        route([model(hostile, ("a", 1, 0))]), {"a": backend("a", credentials=key())}
    )
    (only,) = routes_of(rendered)
    assert model_of(only) == hostile


def test_a_one_mebibyte_key_is_refused_by_size_not_rendered_into_a_crash() -> None:
    big = "k" * (1024 * 1024)
    rendered = envoy.render(
        route([model("m", ("a", 1, 0))]), {"a": backend("a", credentials=key(big))}
    )
    assert rendered.gaps == []
    assert configsecret.secret_size(rendered.text, rendered.files) > configsecret.MAX_SECRET_BYTES


# --- what a rotation changes ------------------------------------------------------------------------


def four_types() -> tuple[api.Route, dict[str, base.ResolvedBackend]]:
    r = route(
        [
            model("gpt", ("oa", 1, 0)),
            model("claude", ("br", 1, 0)),
            model("azure", ("az", 1, 0)),
            model("google/gemini", ("vx", 1, 0)),
        ]
    )
    return r, {
        "oa": backend("oa", credentials=key()),
        "br": backend("br", "AWSBedrock", aws()),
        "az": backend("az", "AzureOpenAI", token("AzureCredentials")),
        "vx": backend("vx", "GCPVertexAI", token("GCPCredentials")),
    }


def test_a_rotation_changes_credential_files_only_and_no_routing_file_holds_a_secret(
    tmp_path: Path,
) -> None:
    r, backends = four_types()
    before = envoy.render(r, backends)
    rotated = {
        "oa": backend("oa", credentials=key("sk-rotated-0002")),
        "br": backend("br", "AWSBedrock", aws(AWS_FILE.replace("AKIATEST", "AKIANEW"))),
        "az": backend("az", "AzureOpenAI", token("AzureCredentials", "az-rotated")),
        "vx": backend("vx", "GCPVertexAI", token("GCPCredentials", "gcp-rotated")),
    }
    after = envoy.render(r, rotated)
    for name in ROUTING:
        assert before.data()[name] == after.data()[name], name
        for secret in (SECRET, TOKEN, "s3cr3t-never-shown", "tok-never-shown", "AKIATEST"):
            assert secret not in before.data()[name]
    changed = {k for k in before.files if before.files[k] != after.files.get(k)}
    assert changed == {"sds-oa.yaml", "aws-br.credentials", "sds-az.yaml", "sds-vx.yaml"}
    assert base.config_hash(before.text, before.files) != base.config_hash(after.text, after.files)
    assert envoy.inputs_hash(r, backends) != envoy.inputs_hash(r, rotated)
    validate(after, tmp_path)


def test_the_inputs_hash_is_the_formats_own_and_follows_the_listener() -> None:
    r, backends = four_types()
    moved = route(cast(list[dict[str, Any]], r["spec"]["rules"]), envoy={"port": 18000})
    hashes = {
        envoy.inputs_hash(r, backends),
        envoy.inputs_hash(moved, backends),
        base.config_hash("x"),
    }
    assert len(hashes) == 3
    assert envoy.render(r, backends) == envoy.render(r, backends)  # deterministic


def test_the_sample_route_renders_every_type_and_validates(tmp_path: Path) -> None:
    sample = yaml.safe_load((Path(__file__).parents[2] / "config/samples/envoy.yaml").read_text())
    r = cast(api.Route, {**sample, "metadata": {**sample["metadata"], "namespace": NS}})
    _, backends = four_types()
    mapping = {
        "openai": backends["oa"],
        "bedrock-web-identity": backends["br"],
        "azure-openai": backends["az"],
        "vertex": backends["vx"],
    }
    resolved = {n: base.ResolvedBackend(n, b.spec, b.credentials) for n, b in mapping.items()}
    for rule in r["spec"]["rules"]:
        for ref in rule["backendRefs"]:
            ref.setdefault("weight", 1)
            ref.setdefault("priority", 0)
    rendered = envoy.render(r, resolved)
    assert rendered.gaps == []
    assert len(routes_of(rendered)) == 4
    validate(rendered, tmp_path)


# --- through the Route reconciler ---------------------------------------------------------------


def test_an_envoy_route_writes_every_file_as_a_key_and_a_restart_writes_nothing() -> None:
    world = World()
    world.chain("a", {"apiKey": SECRET.encode()})
    world.route("a")
    r = world.api.stored(api.ROUTES, NS, "r") or {}
    world.edit(api.ROUTES, "r", spec={**r["spec"], "output": {"format": "Envoy"}})
    world.reconcile()
    data = {k: base64.b64decode(v).decode() for k, v in world.secrets()[-1]["data"].items()}
    assert set(data) == {*ROUTING, "sds-a.yaml"}
    assert SECRET in data["sds-a.yaml"]
    assert all(SECRET not in data[k] for k in ROUTING)
    annotations = world.secrets()[-1]["metadata"]["annotations"]
    assert annotations[api.CONFIG_HASH_ANNOTATION] == base.config_hash(
        data[envoy.BOOTSTRAP], {k: v for k, v in data.items() if k != envoy.BOOTSTRAP}
    )
    cond = world.condition(api.TRANSLATED)
    assert (cond["status"], cond["message"]) == ("True", "Envoy expresses the whole spec")
    writes = len(world.api.writes)
    world.restart()
    world.reconcile()
    assert len(world.api.writes) == writes


# --- every sample, as Envoy would take it -------------------------------------------------------


def sample_documents() -> list[dict[str, Any]]:
    folder = Path(__file__).parents[2] / "config" / "samples"
    return [
        d
        for f in sorted(folder.glob("*.yaml"))
        if f.name != "kustomization.yaml"
        for d in yaml.safe_load_all(f.read_text())
        if d
    ]


def sample_credentials(policy: dict[str, Any]) -> base.ResolvedCredentials:
    """Made-up credentials of a sample policy's type, shaped as its derived Secret's."""
    spec = policy["spec"]
    kind = spec["type"]
    if kind == "AWSCredentials":
        region = spec["awsCredentials"]["region"]
        return aws(AWS_FILE.replace("us-east-1", region))
    if kind == "APIKey":
        return base.ResolvedCredentials(
            "p", kind, {"apiKey": SECRET}, None, header=base.api_key_header(spec)
        )
    c = token(kind)
    return base.ResolvedCredentials(
        c.policy, kind, c.data, None, gcp=base.gcp_location(spec) or c.gcp
    )


def test_every_sample_route_rendered_for_envoy_passes_envoy_validate(tmp_path: Path) -> None:
    """Each Route of config/samples, as if it asked for the Envoy format, with its backends and
    credentials of its policies' types: what Envoy cannot express is a gap, and the rest is a
    configuration Envoy 1.40 accepts."""
    docs = sample_documents()
    specs = {  # with the CRD's default port
        d["metadata"]["name"]: {**d["spec"], "endpoint": {"port": 443, **d["spec"]["endpoint"]}}
        for d in docs
        if d["kind"] == "ServiceBackend"
    }
    credentials = {
        ref["name"]: sample_credentials(d)
        for d in docs
        if d["kind"] == "BackendSecurityPolicy"
        for ref in d["spec"].get("targetRefs") or []
    }
    routes = [d for d in docs if d["kind"] == "Route"]
    assert len(routes) >= 15
    for n, sample in enumerate(routes):
        rules = [
            {
                **rule,
                "backendRefs": [{"weight": 1, "priority": 0, **ref} for ref in rule["backendRefs"]],
            }
            for rule in sample["spec"]["rules"]
        ]
        r = route(rules)
        backends = {
            ref["name"]: base.ResolvedBackend(
                ref["name"], cast(api.BackendSpec, specs[ref["name"]]), credentials.get(ref["name"])
            )
            for rule in rules
            for ref in rule["backendRefs"]
        }
        rendered = envoy.render(r, backends)
        for gap in rendered.gaps:
            assert SECRET not in gap.what
        folder = tmp_path / str(n)
        folder.mkdir()
        validate(rendered, folder)


# --- what a hostile read found (each proven against a live Envoy first) --------------------------


def listener_manager(rendered: base.Rendered) -> dict[str, Any]:
    listener = yaml.safe_load(rendered.files[envoy.LISTENERS])["resources"][0]
    return cast(dict[str, Any], listener["filter_chains"][0]["filters"][0]["typed_config"])


def test_a_route_to_a_cluster_not_loaded_yet_does_not_refuse_the_listener() -> None:
    """Envoy reads lds.yaml before cds.yaml on a swap: with cluster validation on, a new
    backend's route was refused with the whole listener, and the old routes stayed."""
    rendered = envoy.render(
        route([model("m", ("a", 1, 0))]), {"a": backend("a", credentials=key())}
    )
    assert listener_manager(rendered)["route_config"]["validate_clusters"] is False


def test_paths_are_normalised_before_routing_and_escaped_slashes_refused() -> None:
    rendered = envoy.render(
        route([model("m", ("a", 1, 0))]), {"a": backend("a", credentials=key())}
    )
    manager = listener_manager(rendered)
    assert (manager["normalize_path"], manager["merge_slashes"]) == (True, True)
    assert manager["path_with_escaped_slashes_action"] == "REJECT_REQUEST"
    rules = manager["http_filters"][0]["typed_config"]["request_rules"]
    assert "application/json; charset=utf-8" in rules["allow_content_types"]
    removed = manager["route_config"]["virtual_hosts"][0]["request_headers_to_remove"]
    assert {"openai-organization", "x-goog-user-project", "cookie"} <= set(removed)


@pytest.mark.parametrize("sni", ["s" * 300, "bad\x00name", "a b", "-leading"])
def test_an_sni_envoy_would_refuse_is_a_gap_not_a_listener_down(sni: str) -> None:
    backends = {
        "good": backend("good", credentials=key()),
        "bad": backend("bad", credentials=key(), tls={"enabled": True, "sni": sni}),
    }
    rendered = envoy.render(
        route([model("m", ("good", 1, 0)), model("n", ("bad", 1, 0))]), backends
    )
    assert [(g.backend, g.what.split(" ")[0]) for g in rendered.gaps] == [("bad", "tls.sni")]
    assert sorted(clusters_of(rendered)) == ["good"]


def test_an_address_that_is_not_an_ip_binds_loopback_and_is_a_gap() -> None:
    rendered = envoy.render(
        route([model("m", ("a", 1, 0))], envoy={"address": "1.2.3", "port": 18000}),
        {"a": backend("a", credentials=key())},
    )
    socket = yaml.safe_load(rendered.files[envoy.LISTENERS])["resources"][0]["address"]
    assert socket["socket_address"]["address"] == "127.0.0.1"
    assert rendered.gaps[0].what.startswith("spec.output.envoy.address is not an IP address")


def test_a_weight_below_a_millionth_is_a_gap() -> None:
    r = route([model("m", ("tiny", 1, 0), ("big", 3_000_000, 0))])
    rendered = envoy.render(r, {n: backend(n, credentials=key()) for n in ("tiny", "big")})
    assert [(g.backend, g.what.split(":")[0]) for g in rendered.gaps] == [("tiny", "weight 1")]


def test_the_lowest_priority_is_of_the_backends_a_match_can_use() -> None:
    """A priority-0 Vertex AI backend the match's model cannot reach leaves priority 1 rendered."""
    r = route([model("gemini", ("vx", 1, 0), ("oa", 1, 1))])
    backends = {
        "vx": backend("vx", "GCPVertexAI", token("GCPCredentials")),
        "oa": backend("oa", credentials=key()),
    }
    rendered = envoy.render(r, backends)
    assert [x["route"]["cluster"] for x in routes_of(rendered)] == ["oa"]
    assert [g.backend for g in rendered.gaps] == ["vx"]


def test_a_route_too_large_to_write_is_not_built_and_says_so() -> None:
    """64 rules of 16 long matches and 32 backends: building it took 10 s and 540 MB at every
    reconcile; now it is a gap, found from the spec alone."""
    names = [f"b{i}" for i in range(32)]
    rules = [
        {
            "matches": [{"modelName": f"{r}-{m}-" + "x" * 600} for m in range(16)],
            "backendRefs": refs(*((n, 1, 0) for n in names)),
        }
        for r in range(64)
    ]
    backends = {n: backend(n, credentials=key()) for n in names}
    rendered = envoy.render(route(rules), backends)
    assert [g.what.split(" ")[0:2] for g in rendered.gaps] == [["the", "rules"]]
    assert routes_of(rendered) == []
    assert len(rendered.files[envoy.LISTENERS]) < 10_000


def test_hashed_file_names_never_meet_a_real_backends_name() -> None:
    long = "x" * 300
    hashed = envoy.credential_files(long)[0]
    assert "_" in hashed
    assert envoy.credential_files(hashed[4:-5])[0] != hashed


def test_adding_a_backend_to_a_running_envoy_routes_to_it(tmp_path: Path) -> None:
    """Live: a Route edited to add a rule for a new backend, laid out as the kubelet does, takes
    effect in the running Envoy (with cluster validation on, Envoy kept the old routes).

    The writer is held after the ``..data`` rename until Envoy has tried the cluster update, as
    a kubelet slower than Envoy is: the new backend's credential file has no top-level link yet.
    Broken by naming the credential files at the top level (as first built): Envoy refused the
    update (``'sds-b.yaml' does not exist``) and answered 503 for the new backend until the next
    swap (seen under load in CI, with the writer not held)."""
    echo = Echo()
    try:
        port = free_port()
        ep: Any = {"host": "127.0.0.1", "port": echo.port, "tls": {"enabled": False}}
        first = route(
            [{"backendRefs": refs(("a", 1, 0))}], envoy={"address": "127.0.0.1", "port": port}
        )
        backends = {n: backend(n, credentials=key(f"key-{n}"), **ep) for n in ("a", "b")}
        mount = tmp_path / "mount"
        writer = AtomicWriter(mount)
        writer.write({k: v.encode() for k, v in envoy.render(first, backends).data().items()})
        with EnvoyProcess(mount, log=tmp_path / "envoy.log") as proxy:
            proxy.wait_ready()
            assert wait_for(lambda: echo.ask(port, "b"), timeout=30) == "Bearer key-a"
            pid = proxy.pid
            second = route(
                [model("b", ("b", 1, 0)), {"backendRefs": refs(("a", 1, 0))}],
                envoy={"address": "127.0.0.1", "port": port},
            )
            cds = "cluster_manager.cds."

            def outcomes() -> int:
                """The cluster updates Envoy applied or refused."""
                found = proxy.stats(cds)
                return found.get(cds + "update_success", 0) + found.get(cds + "update_rejected", 0)

            tried = outcomes()

            def envoy_tried_the_clusters() -> None:
                wait_for(
                    lambda: outcomes() > tried,
                    timeout=30,
                    what="Envoy's cluster update on the rename",
                )

            data = envoy.render(second, backends).data()
            writer.write(
                {k: v.encode() for k, v in data.items()}, after_swap=envoy_tried_the_clusters
            )
            assert proxy.stats(cds + "update_rejected").get(cds + "update_rejected", 0) == 0
            assert wait_for(lambda: echo.ask(port, "b") == "Bearer key-b", timeout=30)
            assert echo.ask(port, "other") == "Bearer key-a"
            assert proxy.pid == pid
            assert (
                proxy.stats("listener_manager.lds.update_rejected").get(
                    "listener_manager.lds.update_rejected", 0
                )
                == 0
            )
    finally:
        echo.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Echo:
    """A loopback HTTP server answering each request with the Authorization header it got."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = (self.headers.get("Authorization") or "").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def ask(self, port: int, model_name: str) -> str | None:
        """What the backend behind Envoy saw for a request of ``model_name`` (None: no answer)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps({"model": model_name}).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer client"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return cast(str, answer.read().decode())
        except OSError:
            return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

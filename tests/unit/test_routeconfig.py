"""The route configuration is deterministic, leaves out what did not resolve, takes only text
credentials, and counts its size as the API server does."""

from __future__ import annotations

import base64
from typing import Any, cast

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.reconcilers import api, routeconfig


def route() -> api.Route:
    return cast(
        api.Route,
        {
            "apiVersion": api.API_VERSION,
            "kind": "Route",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {
                "rules": [
                    {
                        "matches": [{"modelName": "m"}],
                        "backendRefs": [
                            {"name": "a", "weight": 3, "priority": 0},
                            {"name": "missing", "weight": 1, "priority": 0},
                            {"name": "b", "weight": 1, "priority": 1},
                        ],
                    }
                ]
            },
        },
    )


def backends() -> dict[str, routeconfig.ResolvedBackend]:
    spec: Any = {"schema": "OpenAI", "endpoint": {"host": "h", "port": 443}}
    creds = routeconfig.ResolvedCredentials("p", "APIKey", {"apiKey": "k"}, None)
    return {
        "b": routeconfig.ResolvedBackend("b", spec, None),
        "a": routeconfig.ResolvedBackend("a", spec, creds),
    }


def test_render_is_deterministic_and_in_spec_order() -> None:
    text = routeconfig.render(route(), backends())
    assert text == routeconfig.render(route(), dict(reversed(list(backends().items()))))
    config = yaml.safe_load(text)
    (rule,) = config["rules"]
    assert [b["name"] for b in rule["backends"]] == ["a", "b"], "missing left out, order kept"
    assert rule["backends"][0]["credentials"] == {
        "type": "APIKey",
        "policy": "p",
        "data": {"apiKey": "k"},
    }
    assert "credentials" not in rule["backends"][1]
    assert (rule["backends"][0]["weight"], rule["backends"][1]["priority"]) == (3, 1)


def test_hash_changes_exactly_when_the_text_changes() -> None:
    text = routeconfig.render(route(), backends())
    assert routeconfig.config_hash(text) == routeconfig.config_hash(
        routeconfig.render(route(), backends())
    )
    assert routeconfig.config_hash(text) != routeconfig.config_hash(text.replace("k", "k2"))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_credentials_become_text_key_by_key() -> None:
    assert routeconfig.credentials_text({"apiKey": b64(b"sk-1"), "region": b64("é".encode())}) == {
        "apiKey": "sk-1",
        "region": "é",
    }
    assert routeconfig.credentials_text({}) == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b64(b"\xff\xfe-not-utf8-secret"), "is not UTF-8 text"),
        (b64(b"caf\xe9-latin1-secret"), "is not UTF-8 text"),
        ("not base64 at all!", "is not base64"),
    ],
)
def test_credentials_that_are_not_text_name_the_key_and_not_the_value(
    value: str, problem: str
) -> None:
    with pytest.raises(routeconfig.InvalidCredentials) as caught:
        routeconfig.credentials_text({"good": b64(b"fine"), "credentials": value})
    assert caught.value.key == "credentials"
    assert str(caught.value) == f"key 'credentials' {problem}"
    assert caught.value.__cause__ is None, "no decoder message (it quotes the bytes) chained"
    assert caught.value.__suppress_context__


def test_the_first_bad_key_in_sorted_order_is_named() -> None:
    bad = b64(b"\xff")
    with pytest.raises(routeconfig.InvalidCredentials) as caught:
        routeconfig.credentials_text({"z": bad, "a": bad})
    assert caught.value.key == "a"


@pytest.mark.parametrize(
    "value",
    [
        "\x00nul",
        "\ufeffbom",
        "\x85nel",
        "a\u2028b",
        "null",
        "yes",
        " lead",
        "trail ",
        "😀",
        "a: b",
        "#x",
    ],
)
def test_any_text_credential_survives_the_yaml_round_trip(value: str) -> None:
    spec: Any = {"schema": "OpenAI", "endpoint": {"host": "h", "port": 443}}
    creds = routeconfig.ResolvedCredentials("p", "APIKey", {"apiKey": value}, None)
    text = routeconfig.render(route(), {"a": routeconfig.ResolvedBackend("a", spec, creds)})
    (rule,) = yaml.safe_load(text)["rules"]
    assert rule["backends"][0]["credentials"]["data"] == {"apiKey": value}


def test_secret_size_counts_the_key_and_utf8_bytes_as_the_api_server_does() -> None:
    assert routeconfig.secret_size("") == len("config.yaml")
    assert routeconfig.secret_size("é") == len("config.yaml") + 2
    assert routeconfig.MAX_SECRET_BYTES == 1_048_576


PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300)
SECRET_KEY = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._", min_size=1
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(SECRET_KEY.filter(lambda k: len(k) <= 128), PRINTABLE, max_size=4),
    model=PRINTABLE,
)
def test_libyaml_writes_the_text_pythons_emitter_wrote(data: dict[str, str], model: str) -> None:
    """The configuration's text, so its hash and the written Secret, is what PyYAML's Python
    emitter wrote before libyaml's replaced it: an upgrade rewrites no route configuration (and
    restarts no workload), for printable ASCII: the known differences (same YAML, another form)
    are keys longer than 128 characters and escaped text folded at the line width — see
    ``routeconfig.DUMPER``."""
    spec: Any = {"schema": "OpenAI", "endpoint": {"host": "h", "port": 443}}
    creds = routeconfig.ResolvedCredentials("p", "APIKey", data, None)
    r = route()
    r["spec"]["rules"][0]["matches"] = [{"modelName": model}]
    text = routeconfig.render(r, {"a": routeconfig.ResolvedBackend("a", spec, creds)})
    config = yaml.safe_load(text)
    assert text == yaml.dump(
        config, Dumper=yaml.SafeDumper, sort_keys=False, default_flow_style=False
    )


def test_a_configuration_is_rendered_by_libyaml() -> None:
    """Mutation caught: the Python emitter (5 times slower; a third of a restart's CPU)."""
    assert cast(object, routeconfig.DUMPER) is yaml.CSafeDumper

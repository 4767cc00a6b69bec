"""The route configuration is deterministic and leaves out what did not resolve."""

from __future__ import annotations

from typing import Any, cast

import yaml

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

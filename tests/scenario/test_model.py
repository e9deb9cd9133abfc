"""The Scenario value (chaosproxy/scenario/model.py): the one name rule, a ``match:``
(method, path glob without the query, header globs over every value), an ``envelope:``
of JSON pointers, a scenario's own checks (its name, its provider), whether it needs
framing, the faults that cross tenants and their warnings, and its admin view that
parses back to the same scenario. Files in, problems out, is test_loader.py's."""

from __future__ import annotations

import orjson
import pytest
from multidict import CIMultiDict
from pydantic import ValidationError

from chaosproxy.scenario import parse_scenario
from chaosproxy.scenario.model import (
    NAME_RULE,
    EnvelopeRule,
    MatchRule,
    Scenario,
    cross_tenant_warnings,
    header_values,
    name_error,
)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("dup", None),
        ("A.b_c-9", None),
        ("9lives", None),
        ("x" * 128, None),
        ("x" * 129, NAME_RULE),
        ("", NAME_RULE),
        ("-dash", NAME_RULE),
        (".hidden", NAME_RULE),
        ("two words", NAME_RULE),
        ("a/b", NAME_RULE),
        ("café", NAME_RULE),
        ("none", "is reserved"),
        ("None", None),  # (the passthrough name is exactly "none")
    ],
)
def test_the_name_rule(name: str, why: str | None) -> None:
    assert name_error(name) == why


def test_header_values_are_every_value_of_the_name_in_any_case() -> None:
    assert header_values({"X-Team": "a", "x-team": "b", "Other": "c"}, "X-TEAM") == ["a", "b"]
    multi = CIMultiDict([("X-Team", "a"), ("Host", "h"), ("x-team", "b")])
    assert header_values(multi, "x-team") == ["a", "b"]
    assert header_values({}, "x-team") == []


def test_a_match_holds_when_all_its_parts_do() -> None:
    rule = MatchRule.model_validate(
        {"method": "post", "path": "/v1/*/completions", "headers": {"x-team": "blue-*"}}
    )
    assert rule.method == "POST"
    blue = {"X-Team": "blue-7"}
    assert rule.matches("POST", "/v1/chat/completions", blue)
    assert rule.matches("post", "/v1/chat/completions?stream=1", blue)  # query left out
    assert rule.matches("POST", "/v1/a/b/completions", blue)  # * crosses /
    assert not rule.matches("GET", "/v1/chat/completions", blue)
    assert not rule.matches("POST", "/V1/chat/completions", blue)  # path case counts
    assert not rule.matches("POST", "/v1/chat/completions", {"X-Team": "red"})
    assert not rule.matches("POST", "/v1/chat/completions", {})  # absent: no match
    repeated = CIMultiDict([("X-Team", "red"), ("X-Team", "blue-1")])
    assert rule.matches("POST", "/v1/chat/completions", repeated)  # any value
    assert MatchRule().matches("DELETE", "/anything", {})  # no parts: everything


def test_an_envelope_is_one_or_two_json_pointers() -> None:
    assert EnvelopeRule(stream="/meta/stream").sequence is None
    assert EnvelopeRule(sequence="/seq").stream is None
    with pytest.raises(ValidationError, match="give stream, sequence or both"):
        EnvelopeRule()
    with pytest.raises(ValidationError) as caught:
        EnvelopeRule(stream="meta/stream")  # no leading slash
    assert [e["loc"] for e in caught.value.errors()] == [("stream",)]


def test_a_scenario_refuses_a_bad_name_and_an_unknown_provider() -> None:
    with pytest.raises(ValidationError, match="'none' is reserved: it selects no scenario"):
        Scenario(name="none", faults=())
    with pytest.raises(ValidationError, match="must be 1-128 letters"):
        Scenario(name="a b", faults=())
    with pytest.raises(
        ValidationError,
        match=r"must be one of: auto, openai-chat, openai-responses, openai-realtime, anthropic, "
        r".*generic",
    ):
        Scenario(name="x", provider="openai", faults=())
    assert Scenario(name="x", provider="anthropic", faults=()).provider == "anthropic"


def test_a_scenario_needs_framing_when_one_of_its_faults_does() -> None:
    def scenario(faults: str) -> Scenario:
        return parse_scenario(f"name: x\nfaults: {faults}\n", "t")

    assert scenario("[]").needs_framing is False
    assert scenario("[{rechunk: {size: 3}}]").needs_framing is False
    assert scenario("[{drop: {nth: 2}}]").needs_framing is True
    assert scenario("[{rechunk: {size: 3}}, {drop: {nth: 2}}]").needs_framing is True


def test_the_faults_that_cross_tenants_are_named_and_warned_about() -> None:
    crossing = parse_scenario(
        "name: crossing\nfaults:\n  - drop: {nth: 2}\n"
        "  - splice: {from: previous, after: 2, across_tenants: true}\n"
        "  - splice: {from: previous, after: 3}\n",
        "scenarios/crossing.yaml",
    )
    assert crossing.cross_tenant_faults() == ["faults[1].splice.across_tenants"]
    staying = parse_scenario("name: staying\nfaults: [{drop: {nth: 2}}]\n", "")
    assert cross_tenant_warnings([staying, crossing]) == [
        "scenarios/crossing.yaml: faults[1].splice.across_tenants: true: scenario crossing "
        "puts events of every tenant's streams (other users' text) into its answers"
    ]
    nameless = crossing.model_copy(update={"source": ""})
    assert cross_tenant_warnings([nameless])[0].startswith("crossing: faults[1].splice")


def test_the_admin_view_parses_back_to_the_same_scenario() -> None:
    text = (
        "name: full\ndescription: every key\nseed: 7\nprovider: openai-chat\nformat: sse\n"
        "match: {method: post, path: /v1/*, headers: {x-team: blue}}\nrate: 0.5\n"
        "requests: [3, 1]\nenvelope: {stream: /s}\n"
        "faults: [{stall: {after: 2, duration: 800ms}}, {drop: {nth: 2}}]\n"
    )
    scenario = parse_scenario(text, "scenarios/full.yaml")
    view = scenario.as_dict()
    assert {k: view[k] for k in ("name", "seed", "format", "match", "rate", "requests")} == {
        "name": "full",
        "seed": 7,
        "format": "sse",
        "match": {"method": "POST", "path": "/v1/*", "headers": {"x-team": "blue"}},
        "rate": 0.5,
        "requests": [1, 3],
    }
    assert view["source"] == "scenarios/full.yaml"
    assert view["envelope"] == {"stream": "/s", "sequence": None}
    assert "mock" not in view
    assert view["faults"][0]["stall"]["duration"] == "800ms"
    again = parse_scenario(orjson.dumps(view), "admin", read_only=True)
    assert again.model_copy(update={"source": scenario.source}) == scenario
    plain = parse_scenario("name: plain\nfaults: []\n", "t").as_dict()
    assert (plain["match"], plain["requests"], plain["resume"], "envelope" in plain) == (
        None,
        None,
        None,
        False,
    )

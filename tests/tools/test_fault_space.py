"""The space ``chaosproxy explore`` draws from (chaosproxy/tools/fault_space.py): pure, so every
test is seeds and shapes in, exact scenarios out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.tools.fault_space import (
    FaultDraw,
    Shape,
    Space,
    canonical,
    draft_from_json,
    draft_json,
    draft_key,
    explorable,
    run_seed,
    scenario_data,
    scenario_yaml,
    shape_of,
    usable_faults,
    validated,
)
from tests.support.properties import examples

#: The mock's OpenAI Chat answer as the Python SDK example asks for it (24 tokens).
CHAT = Shape("openai-chat", "sse", 27, {"start": 1, "delta": 24, "other": 1, "terminal": 1}, 6704)
#: The mock's Responses answer of tests/clients/responses_client.py (6 tokens).
RESPONSES = Shape(
    "openai-responses", "sse", 14, {"delta": 6, "other": 6, "start": 1, "terminal": 1}, 5603
)
ANTHROPIC = Shape(
    "anthropic",
    "sse",
    12,
    {"delta": 6, "other": 2, "start": 1, "ping": 1, "usage": 1, "terminal": 1},
    1460,
)
OLLAMA = Shape("ollama", "ndjson", 8, {"delta": 7, "terminal": 1}, 900)
RAW = Shape("generic", "raw", 3, {"other": 3}, 300)
SHAPES = [CHAT, RESPONSES, ANTHROPIC, OLLAMA, RAW]


def test_a_seed_draws_the_same_scenario_every_time() -> None:
    space = Space(CHAT)
    assert run_seed(1, 1) == run_seed(1, 1) != run_seed(1, 2) != run_seed(2, 1)
    assert 0 <= run_seed(7, 3) <= MAX_SEED
    drafts = [space.read(space.draw(run_seed(1, k)))[1] for k in range(1, 4)]
    assert drafts == [
        [{"cut": {"after": 17, "how": "close"}}, {"delay": {"per_event": "20ms"}}],
        [
            {"splice": {"from": "previous", "after": 5, "count": 2}},
            {"comment": {"every": 4}},
            {"reorder": {"kind": "other", "nth": 1, "window": 3}},
        ],
        [{"coalesce": {"window": "60ms"}}],
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.provider}-{s.format}")
def test_every_draw_is_a_valid_scenario_that_reads_back_the_same(shape: Shape) -> None:
    """A thousand draws per shape: each validates with the scenario loader, from the
    very text that would be written, each fault once, its draft read back unchanged."""
    space = Space(shape)
    for k in range(1, 1001):
        seed = run_seed(5, k)
        draft = space.draw(seed)
        read, faults = space.read(draft)
        assert read == draft
        assert 1 <= len(draft) <= space.max_faults
        names = [f.fault for f in draft]
        assert len(set(names)) == len(names)
        assert set(names) <= set(usable_faults(shape))
        text = scenario_yaml(scenario_data(f"run-{k}", faults, seed=seed))
        scenario = validated(text, f"run-{k}")
        assert [name for name, _ in scenario.faults] == names
        assert scenario.seed == seed
        assert scenario.as_dict()["faults"] == [
            {n: c.model_dump(mode="json", by_alias=True) for n, c in [pair]}
            for pair in scenario.faults
        ]
        dumped = [
            {n: c.model_dump(mode="json", exclude_defaults=True, by_alias=True)}
            for n, c in scenario.faults
        ]
        assert dumped == faults


def test_positions_fall_within_the_clean_stream() -> None:
    space = Space(RESPONSES)
    for k in range(1, 3001):
        for fault in space.read(space.draw(run_seed(2, k)))[1]:
            ((name, params),) = fault.items()
            kind = params.get("kind")
            count = RESPONSES.count(kind) if isinstance(kind, str) else RESPONSES.events
            nth = params.get("nth")
            for n in [nth] if isinstance(nth, int) else nth or []:
                assert 1 <= n <= count, fault
            if "range" in params:
                assert 1 <= params["range"][0] < params["range"][1] <= count, fault
            for key in ("after", "before"):
                if isinstance(params.get(key), int):
                    assert 0 <= params[key] <= RESPONSES.events, fault
            if "after_bytes" in params:
                assert params["after_bytes"] < RESPONSES.bytes
            if name == "throttle":  # the whole stream within a second at the slowest
                assert params["bytes_per_second"] >= max(16000, RESPONSES.bytes)


def test_faults_restricts_the_space_and_endless_leaves_out_what_never_ends() -> None:
    space = Space(CHAT, ("stall", "hang", "drop"), endless=False)
    assert space.faults == ("stall", "drop")
    for k in range(1, 500):
        for fault in space.read(space.draw(run_seed(3, k)))[1]:
            assert "hang" not in fault
            assert "forever" not in fault.get("stall", {})
    with pytest.raises(ValueError, match="not in the space: status"):
        Space(CHAT, ("status",))
    with pytest.raises(ValueError, match="none of these faults fits a raw stream"):
        Space(RAW, ("drop", "duplicate"))


def test_what_fits_which_stream() -> None:
    assert usable_faults(RAW) == (
        "rechunk",
        "coalesce",
        "delay",
        "throttle",
        "stall",
        "cut",
        "hang",
        "compress",
    )
    ndjson = set(usable_faults(OLLAMA))
    assert {"drop", "mutate", "splice"} <= ndjson
    assert not {"comment", "ids", "line_endings"} & ndjson  # SSE only
    assert "mutate" not in usable_faults(Shape("generic", "sse", 5, {"other": 5}))
    # Bedrock's event stream: the event faults, but no text-syntax fault, and no mutate
    # (no content path of its is known to it)
    bedrock = Shape("bedrock", "eventstream", 7, {"start": 1, "delta": 3, "terminal": 1}, 700)
    events = set(usable_faults(bedrock))
    assert {"drop", "duplicate", "reorder", "inject", "corrupt", "oversize", "splice"} <= events
    assert not {"comment", "ids", "line_endings", "mutate"} & events
    assert set(usable_faults(CHAT)) == set(explorable())


def test_canonical_leaves_out_defaults_and_writes_durations_with_units() -> None:
    assert canonical("duplicate", {"kind": "delta", "nth": 2, "times": 1}) == {
        "kind": "delta",
        "nth": 2,
    }
    assert canonical("delay", {"first_byte": 250}) == {"first_byte": "250ms"}
    assert canonical("cut", {"after": 3, "how": "abort", "position": "boundary"}) == {"after": 3}
    assert canonical("splice", {"from": "previous", "after": 2}) == {
        "from": "previous",
        "after": 2,
    }


def test_the_key_orders_simpler_first() -> None:
    one = (FaultDraw("drop", (0, 0, 2)),)
    assert draft_key(one) < draft_key((FaultDraw("drop", (0, 0, 3)),))
    assert draft_key(one) < draft_key((FaultDraw("drop", (0, 0, 0, 1)),))  # shorter first
    assert draft_key(one) < draft_key((FaultDraw("bom"), FaultDraw("hang")))  # fewer faults
    assert draft_from_json(draft_json(one)) == one
    with pytest.raises(ValueError, match="not a draft"):
        draft_from_json([["drop", ["x"]]])


def test_the_scenario_file_text() -> None:
    data = scenario_data(
        "found-1",
        [
            {"drop": {"kind": "delta", "nth": 1}},
            {"inject": {"after": 3, "event": {"kind": "error"}}},
        ],
        seed=12,
        description="silent_corruption: a: b",
    )
    text = scenario_yaml(data, ["silent_corruption", "", "run 3"])
    assert text == (
        "# silent_corruption\n#\n# run 3\n"
        "name: found-1\n"
        "description: 'silent_corruption: a: b'\n"
        "seed: 12\n"
        "faults:\n"
        "- drop: {kind: delta, nth: 1}\n"
        "- inject:\n"
        "    after: 3\n"
        "    event: {kind: error}\n"
    )
    read = validated(text, "x")
    assert [{n: canonical(n, c.model_dump(mode="json"))} for n, c in read.faults] == data["faults"]


def test_the_shape_of_a_clean_run() -> None:
    lines: list[dict[str, Any]] = [
        {"event": "request", "request_id": "r-1"},
        {"event": "frame", "request_id": "r-1", "events": [1], "kinds": ["start"]},
        {"event": "frame", "request_id": "r-1", "events": [2], "kinds": ["delta"]},
        {"event": "frame", "request_id": "r-1", "events": [3, 4], "kinds": ["delta"]},
        {"event": "frame", "request_id": "r-1", "events": [0], "kinds": []},  # a comment
        {"event": "frame", "request_id": "r-2", "events": [9], "kinds": ["delta"]},
        {"event": "frame", "request_id": "r-1", "events": [5], "kinds": ["delta", "terminal"]},
        {
            "event": "response_end",
            "request_id": "r-1",
            "provider": "gemini",
            "format": "sse",
            "events_in": 5,
            "bytes": 400,
        },
    ]
    assert shape_of(lines, "r-1") == Shape(
        "gemini", "sse", 5, {"start": 1, "delta": 4, "terminal": 1}, 400
    )
    assert shape_of(lines, "r-2") is None  # no end: not a stream the proxy framed
    unframed = [{"event": "response_end", "request_id": "r-3", "outcome": "completed"}]
    assert shape_of(unframed, "r-3") is None


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, MAX_SEED), st.sampled_from(SHAPES))
def test_any_seed_reads_back_to_itself(seed: int, shape: Shape) -> None:
    space = Space(shape)
    draft = space.draw(seed)
    assert space.read(draft)[0] == draft
    assert space.draw(seed) == draft

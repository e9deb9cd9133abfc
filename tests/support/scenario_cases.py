"""Scenario files that ``chaosproxy validate`` refuses, with exactly what it says: the
loader's tests (tests/scenario/test_scenario.py) check each message, and the JSON
Schema's (tests/tools/test_schema.py) check that the shipped schema refuses each too."""

from __future__ import annotations

#: (the file's text, as ``s.yaml``; the problems ``validate`` reports, in order).
ONE_PROBLEM: list[tuple[str, list[str]]] = [
    ("seed: x\nfaults: []", ["s.yaml:1: seed: must be an integer"]),
    ("seed: 1.5\nfaults: []", ["s.yaml:1: seed: must be an integer"]),
    ("seed: true\nfaults: []", ["s.yaml:1: seed: must be an integer"]),
    (
        "seed: 9223372036854775808\nfaults: []",
        ["s.yaml:1: seed: must be <= 9223372036854775807"],
    ),
    ("name: [a]\nfaults: []", ["s.yaml:1: name: must be a string"]),
    ("description: 5\nfaults: []", ["s.yaml:1: description: must be a string"]),
    ("faults: {drop: {}}", ["s.yaml:1: faults: must be a list"]),
    ("faults: []\nrequests: []", ["s.yaml:2: requests: must not be empty"]),
    ("faults: []\nrequests: 1", ["s.yaml:2: requests: must be a list"]),
    ("faults: []\nmatch: /v1/*", ["s.yaml:2: match: must be a mapping"]),
    (
        "faults: []\nmatch:\n  headers: {X-A: 1}",
        ["s.yaml:3: match.headers.X-A: must be a string"],
    ),
    ("seed: 3", ["s.yaml:1: faults: required"]),
    (
        "faults:\n  - 5",
        ["s.yaml:2: faults[0]: must be a fault name or a one-key mapping {name: params}"],
    ),
    ("faults:\n  - rechunk: 7", ["s.yaml:2: faults[0].rechunk: must be a mapping"]),
    ("faults:\n  - status", ["s.yaml:2: faults[0].status.code: required"]),
    (
        "faults:\n  - status:\n      body: x",
        ["s.yaml:2: faults[0].status.code: required"],
    ),
    (
        "faults:\n  - drop: {nth: x}",
        ["s.yaml:2: faults[0].drop.nth: must be an integer or a list"],
    ),
    (
        "faults:\n  - drop: {probability: 1.5}",
        ["s.yaml:2: faults[0].drop.probability: must be <= 1"],
    ),
    (
        "faults:\n  - cut: {after: -1}",
        ["s.yaml:2: faults[0].cut.after: must be >= 0"],
    ),
    (
        "faults:\n  - cut: {after: never}",
        ["s.yaml:2: faults[0].cut.after: must be an integer or one of: start, terminal"],
    ),
    (
        "faults:\n  - cut: {after: 1, how: explode}",
        ["s.yaml:2: faults[0].cut.how: must be one of: close, abort, reset"],
    ),
    (
        "faults:\n  - delay: {first_byte: 2x}",
        [
            "s.yaml:2: faults[0].delay.first_byte: not a duration: '2x'"
            " (use a number of ms, or 250ms, 2s)"
        ],
    ),
    (
        "faults:\n  - delay: {first_byte: -5}",
        ["s.yaml:2: faults[0].delay.first_byte: must be >= 0"],
    ),
    (
        "faults:\n  - rechunk: {random: [3]}",
        ["s.yaml:2: faults[0].rechunk.random: too few items (expected at least 2)"],
    ),
    ("provider: openai\nfaults: []", ["s.yaml:1: provider: must be one of: auto, "
     "openai-chat, openai-responses, openai-realtime, anthropic, gemini, ollama, bedrock, "
     "generic"]),
    # A typo of a provider's name: the schema's enum (the registry's names) refuses it too.
    ("provider: anthropics\nfaults: []", ["s.yaml:1: provider: must be one of: auto, "
     "openai-chat, openai-responses, openai-realtime, anthropic, gemini, ollama, bedrock, "
     "generic"]),
    ("faults:\n  - drop: {kind: text}", ["s.yaml:2: faults[0].drop.kind: unknown kind "
     "'text'; one of start, delta, tool_delta, usage, ping, error, terminal, other"]),
    ("name: none\nfaults: []", ["s.yaml:1: name: 'none' is reserved: it selects no scenario"]),
    ("name: my scenario\nfaults: []", ["s.yaml:1: name: must be 1-128 letters, digits, '.', "
     "'_' or '-', starting with a letter or digit"]),
    ("faults: [status]", ["s.yaml:1: faults[0].status.code: required"]),
    ("format: raw\nfaults:\n  - drop: {nth: 2}", ["s.yaml:3: faults[0].drop: needs sse or "
     "ndjson framing; it cannot apply with format: raw"]),
    ("provider: ollama\nfaults:\n  - split_tool_args: {every: 2}", ["s.yaml:3: "
     "faults[0].split_tool_args: cannot apply with provider: ollama: ollama sends each tool "
     "call whole: there are no argument fragments"]),
    ("faults:\n  - cut: {}", ["s.yaml:2: faults[0].cut: give exactly one of after, before, "
     "after_bytes"]),
    ("faults:\n  - cut: {after: 1, before: terminal}", ["s.yaml:2: faults[0].cut: give "
     "exactly one of after, before, after_bytes"]),
    ("faults:\n  - stall: {after: 2}", ["s.yaml:2: faults[0].stall: give exactly one of "
     "duration, forever (forever: true)"]),
    ("faults:\n  - delay: {}", ["s.yaml:2: faults[0].delay: give at least one of first_byte, "
     "per_event, jitter, headers"]),
    ("faults:\n  - coalesce: {events: 2, all: true}", ["s.yaml:2: faults[0].coalesce: give "
     "exactly one of events, window, all (all: true)"]),
    ("faults:\n  - inject: {after: 1, event: {data: {a: 1}, raw: x}}", ["s.yaml:2: "
     "faults[0].inject.event: give exactly one of data, raw, kind (got data, raw)"]),
    ("faults:\n  - splice: {from: previous, after: 1, kind: texts}", ["s.yaml:2: "
     "faults[0].splice.kind: unknown kind 'texts'; one of start, delta, tool_delta, usage, "
     "ping, error, terminal, other"]),
]  # fmt: skip

"""The journal's entries (chaosproxy/observe/journal.py): what one request keeps, bounded
in bytes (header fields cut with the sizes received, the body only with
``--log-content`` and within the entry's bound), bodies nested too deep kept as their
hash, ``contains=`` refused where the prompts are not kept, and what an entry counts
as held against what it really holds (tracemalloc)."""

from __future__ import annotations

import gc
import hashlib
import tracemalloc
from typing import Any

import orjson
import pytest

from chaosproxy.core.records import RequestSummary
from chaosproxy.observe.journal import (
    CUT,
    HEADER_VALUE_KEEP,
    HEADERS_KEEP,
    MAX_DEPTH,
    MAX_NAME,
    MAX_TOOLS,
    NO_CONTENT,
    ContentNotKept,
    Criteria,
    RequestEntry,
    VerificationError,
    body_text,
    too_deep,
    verify,
)

CHAT = "/v1/chat/completions"
QUESTION = "What's the weather in Paris?"
SYSTEM = "You are terse."


def chat(**extra: Any) -> bytes:
    return orjson.dumps(
        {
            "model": "gpt-4o",
            "stream": True,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": QUESTION},
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            **extra,
        }
    )


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


# --------------------------------------------------------------------------- prompts


def test_without_content_the_entry_keeps_no_prompt_only_lengths_and_hashes() -> None:
    body = chat(api_key="sk-secret")
    entry = RequestEntry.read("POST", CHAT, [("Authorization", "Bearer sk-x")], body)
    shown = entry.as_dict()
    assert shown == {
        "method": "POST",
        "path": CHAT,
        "headers": {"authorization": "***"},
        "model": "gpt-4o",
        "stream": True,
        "tools": ["get_weather"],
        "messages": [
            {"role": "system", "chars": len(SYSTEM), "sha256": sha(SYSTEM)},
            {"role": "user", "chars": len(QUESTION), "sha256": sha(QUESTION)},
        ],
        "body_omitted": True,
        "body_omitted_reason": "content",
        "body_bytes": len(body),
        "body_sha256": sha(body),
    }
    assert entry.body is None
    text = orjson.dumps(shown).decode()
    assert "Paris" not in text and "terse" not in text and "sk-" not in text
    # The request line says the same, without the body.
    assert entry.line_fields() == {
        "model": "gpt-4o",
        "messages": 2,
        "tools": ["get_weather"],
        "body_bytes": len(body),
        "body_sha256": sha(body),
    }


def test_with_content_the_entry_keeps_the_body_masked() -> None:
    body = chat(api_key="sk-secret")
    shown = RequestEntry.read("POST", CHAT, [], body, content=True).as_dict()
    assert shown["messages"] == [
        {"role": "system", "text": SYSTEM},
        {"role": "user", "text": QUESTION},
    ]
    assert shown["body"]["api_key"] == "***"
    assert "body_omitted" not in shown


def test_a_body_over_the_entry_bound_keeps_its_digests_then_only_a_count() -> None:
    body = chat()
    fits = RequestEntry.read("POST", CHAT, [], body, keep=len(body), content=True)
    assert fits.body == body
    over = RequestEntry.read("POST", CHAT, [], body, keep=len(body) - 1, content=True).as_dict()
    assert (over["body_omitted"], over["body_omitted_reason"]) == (True, "size")
    assert over["messages"] == [
        {"role": "system", "chars": len(SYSTEM), "sha256": sha(SYSTEM)},
        {"role": "user", "chars": len(QUESTION), "sha256": sha(QUESTION)},
    ]
    tiny = RequestEntry.read("POST", CHAT, [], body, keep=100, content=True).as_dict()
    assert tiny["messages"] == 2  # (two digests do not fit in 100 bytes)


def test_contains_is_refused_where_the_prompts_are_not_kept() -> None:
    body = chat()
    summary: Any = {
        "request_id": "r-1",
        "scenario": None,
        "method": "POST",
        "path": CHAT,
        "request": RequestEntry.read("POST", CHAT, [], body).as_dict(),
    }
    with pytest.raises(ContentNotKept) as info:
        verify([summary], Criteria(contains="Paris"))
    assert str(info.value) == NO_CONTENT and "--log-content" in NO_CONTENT
    # The other filters work on what is kept.
    assert verify([summary], Criteria(model="gpt-*", tool="get_weather"), 1) == [summary]
    kept: Any = {
        **summary,
        "request": RequestEntry.read("POST", CHAT, [], body, content=True).as_dict(),
    }
    assert verify([kept], Criteria(contains="Paris"), 1) == [kept]
    # The hash of a message is no text of it.
    digest = summary["request"]["messages"][1]["sha256"][:6]
    kept_small: RequestSummary = {
        **summary,
        "request": RequestEntry.read("POST", CHAT, [], body, keep=300, content=True).as_dict(),
    }
    with pytest.raises(VerificationError):
        verify([kept_small], Criteria(contains=digest))


# --------------------------------------------------------------------------- headers


def test_header_fields_are_cut_and_left_out_with_the_sizes_received() -> None:
    big = "v" * 64_000
    fields = [("Host", "proxy"), ("X-Big", big)] + [(f"X-Pad-{k}", big) for k in range(20)]
    entry = RequestEntry.read("POST", CHAT, fields, None)
    shown = entry.as_dict()
    cut = "v" * HEADER_VALUE_KEEP + CUT
    kept = HEADERS_KEEP // (len("X-Pad-0") + len(cut))  # (the Host and X-Big fit too)
    assert shown["headers"] == {
        "host": "proxy",
        "x-big": cut,
        **{f"x-pad-{k}": cut for k in range(kept - 1)},
    }
    assert shown["headers_truncated"] == {
        "fields": 22,
        "bytes": sum(len(n) + len(v) for n, v in fields),
        "omitted": 22 - 1 - kept,
        "cut": kept,
    }
    assert sum(len(n) + len(v) for n, v in entry.headers) <= HEADERS_KEEP


def test_short_heads_are_kept_whole_and_say_nothing_of_truncation() -> None:
    shown = RequestEntry.read("GET", "/v1/models", [("Accept", "*/*")], None).as_dict()
    assert shown == {"method": "GET", "path": "/v1/models", "headers": {"accept": "*/*"}}


def test_a_small_entry_bound_bounds_the_headers_too() -> None:
    fields = [(f"X-{k}", "v" * 100) for k in range(10)]
    entry = RequestEntry.read("POST", CHAT, fields, None, keep=250)
    assert len(entry.headers) == 2  # (103 bytes each)
    assert entry.as_dict()["headers_truncated"]["omitted"] == 8


def test_names_and_tools_are_bounded() -> None:
    tools = [{"name": f"t{i}" * 200} for i in range(MAX_TOOLS + 50)]
    body = orjson.dumps({"model": "m" * 10_000, "tools": tools, "messages": []})
    entry = RequestEntry.read("POST", "/v1/messages", [], body)
    shown = entry.as_dict()
    assert shown["model"] == "m" * MAX_NAME + CUT
    assert len(shown["tools"]) == MAX_TOOLS
    assert all(len(t) <= MAX_NAME + 1 for t in shown["tools"])
    assert entry.line_fields()["tools"] == shown["tools"]


# --------------------------------------------------------------------------- depth


def deep(levels: int) -> bytes:
    return chat(metadata=None).replace(b'"metadata":null', b'"m":' + b"[" * levels + b"]" * levels)


def test_the_depth_is_measured_without_recursion() -> None:
    assert not too_deep({"a": [1, {"b": []}]}, limit=4)  # (object, array, object, array)
    assert too_deep({"a": [1, {"b": [[]]}]}, limit=4)
    value: Any = []
    for _ in range(100_000):  # far past Python's recursion limit
        value = [value]
    assert too_deep(value)


@pytest.mark.parametrize("content", [False, True])
def test_a_body_nested_too_deep_is_kept_as_its_hash(content: bool) -> None:
    body = deep(900)
    entry = RequestEntry.read("POST", CHAT, [], body, content=content)
    shown = entry.as_dict()
    assert shown == {
        "method": "POST",
        "path": CHAT,
        "headers": {},
        "model": None,
        "stream": None,
        "tools": [],
        "messages": 0,
        "body_omitted": True,
        "body_omitted_reason": "depth",
        "body_bytes": len(body),
        "body_sha256": sha(body),
    }
    assert "body" not in entry.line_fields(body if content else None)
    assert body_text(body) == (
        f"(JSON nested deeper than {MAX_DEPTH} levels: {len(body)} bytes, sha256 {sha(body)})"
    )
    summary: Any = {"request_id": "r", "scenario": None, "method": "POST", "path": CHAT}
    if content:  # searched, found in nothing
        assert verify([{**summary, "request": shown}], Criteria(model="*"), 1)
        with pytest.raises(VerificationError):
            verify([{**summary, "request": shown}], Criteria(contains="hi"))


def test_a_body_within_the_depth_is_read() -> None:
    body = deep(MAX_DEPTH - 1)
    shown = RequestEntry.read("POST", CHAT, [], body, content=True).as_dict()
    assert shown["body"] == orjson.loads(body)
    assert shown["messages"][1] == {"role": "user", "text": QUESTION}


# --------------------------------------------------------------------------- held


@pytest.mark.parametrize(
    ("content", "messages"), [(False, 1), (True, 1), (False, 100)], ids=["hashes", "body", "many"]
)
def test_what_an_entry_counts_is_what_it_really_holds(content: bool, messages: int) -> None:
    """``held`` against tracemalloc: never less than what the entries take, and not
    much more (the bounds documented are what is really held)."""
    body = chat() if messages == 1 else chat(messages=[{"role": "user", "content": f"m {i}"}
                                                       for i in range(messages)])  # fmt: skip
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        # (the header strings made here, as aiohttp makes them for each request: the
        # entry keeps them once the request is gone)
        entries = [
            RequestEntry.read(
                "POST", CHAT, [(f"X-H{k}", f"value-{i}-{k}" * 3) for k in range(12)], body,
                content=content,
            )
            for i in range(2000)
        ]  # fmt: skip
        real = (tracemalloc.get_traced_memory()[0] - before) / len(entries)
    finally:
        tracemalloc.stop()
    held = sum(e.held for e in entries) / len(entries)
    assert real <= held <= 1.5 * real, (real, held)

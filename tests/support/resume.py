"""The resumption tests' shared parts: a plain stream of eight words, the mock's
reference answer, and the Node EventSource client's policies and checks."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from chaosproxy.control.start import RunningProxy

WORDS = [f"w{i}" for i in range(1, 9)]
PLAIN = b"".join(b"data: " + w.encode() + b"\n\n" for w in WORDS)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "tell me"}], "stream": True}


def token_of(proxy: RunningProxy, request_id: str | None) -> str:
    """The token of the kept stream ``request_id`` began: its events' ids are
    ``<token>.<n>``, a token that owes nothing to the (sequential) request id."""
    [stream] = [s for s in proxy.state.resume.store.streams() if s.request_id == request_id]
    token = stream.token
    assert len(token) >= 22 and request_id is not None and request_id not in token
    return token


async def mock_reference(proxy: RunningProxy, body: dict[str, object] = CHAT) -> list[str]:
    """The data of every event of the same request, uncut (the mock is deterministic)."""
    async with httpx.AsyncClient(timeout=10) as client:
        resp = await client.post(
            proxy.url + "/v1/chat/completions", json=body, headers={"X-Chaos-Scenario": "none"}
        )
    return [
        line[len("data: ") :]
        for block in resp.text.split("\n\n")
        for line in block.split("\n")
        if line.startswith("data: ")
    ]


def text_of(datas: list[str]) -> str:
    out = []
    for data in datas:
        if data == "[DONE]":
            continue
        for choice in orjson.loads(data)["choices"]:
            out.append(choice["delta"].get("content") or "")
    return "".join(out)


NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _why_skip() -> str | None:
    if shutil.which("node") is None:
        return "`node` is not on PATH (the Node client tests need Node >= 20)"
    if not (NODE_DIR / "node_modules" / "eventsource").is_dir():
        return "tests/node/node_modules is absent: run `npm ci --prefix tests/node`"
    return None


NODE_SKIP = _why_skip()

#: The request tests/node/eventsource-resume.mjs sends (lib.mjs's PROMPT).
NODE_CHAT = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Plan my week, please."}],
    "stream": True,
}
POLICIES = ["resume", "replay_last", "restart", "new_stream", "unsupported", "expired"]


def scenario(policy: str, cut: str) -> str:
    return (
        f"resume: {{policy: {policy}}}\n"
        "requests: [1]\n"
        "faults:\n"
        "  - ids: {retry: 50}\n"
        f"  - cut: {cut}\n"
    )


def all_ids(run: dict[str, Any]) -> list[str]:
    return [i for c in run["connections"] for i in c["ids"]]


def all_datas(run: dict[str, Any]) -> list[str]:
    return [d for c in run["connections"] for d in c["datas"]]


def twice(run: dict[str, Any]) -> list[str]:
    ids = all_ids(run)
    return [i for i in dict.fromkeys(ids) if ids.count(i) > 1]


def check(
    run: dict[str, Any],
    policy: str,
    reference: list[str],
    cut_at: int,
    shown: Callable[[str], str] = str,
) -> None:
    """What EventSource received under ``policy`` after a cut once ``cut_at`` events
    were sent, the upstream's events being ``reference``; ``run["sent"]`` holds each
    ``Last-Event-ID`` sent as ``shown`` shows it (the frame log shows a token cut:
    chaosproxy.core.history.shown_event_id)."""
    conns = run["connections"]
    n = len(reference)
    first_ids = conns[0]["ids"]
    assert len(first_ids) == cut_at
    rid = first_ids[0].rpartition(".")[0]
    assert first_ids == [f"{rid}.{i}" for i in range(1, cut_at + 1)]
    assert conns[0]["datas"] == reference[:cut_at]
    assert run["sent"][:2] == [None, shown(f"{rid}.{cut_at}")]  # it sent Last-Event-ID itself
    assert run["stopped"]["code"] == 204  # and 204 stopped it
    if policy in ("unsupported", "expired"):
        assert len(conns) == 1 and len(run["sent"]) == 2
        assert all_datas(run) == reference[:cut_at]
        return
    assert len(conns) == 2 and len(run["sent"]) == 3
    second = conns[1]["ids"]
    if policy == "new_stream":
        rid2 = second[0].rpartition(".")[0]
        assert rid2 != rid
        assert second == [f"{rid2}.{i}" for i in range(1, n + 1)]
        assert all_datas(run) == reference[:cut_at] + reference  # two generations
        assert run["sent"][2] == shown(f"{rid2}.{n}")
        assert twice(run) == []
        return
    start = {"resume": cut_at + 1, "replay_last": cut_at, "restart": 1}[policy]
    assert second == [f"{rid}.{i}" for i in range(start, n + 1)]
    assert twice(run) == [f"{rid}.{i}" for i in range(start, cut_at + 1)]
    assert conns[1]["datas"] == reference[start - 1 :]
    assert run["sent"][2] == shown(f"{rid}.{n}")

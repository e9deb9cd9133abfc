"""The Node `ws` package as a realtime client (tests/node/realtime-ws.mjs) through the
proxy's WebSocket relay in front of the built-in mock: the mock's exact answer with no
scenario, and under each library realtime scenario what docs/providers.md records.

(The Node `openai` SDK's realtime client, ``OpenAIRealtimeWS``, always dials ``wss:``:
its ``buildRealtimeURL`` sets the protocol, and refuses a custom URL that is not
``wss:``; the proxy listens in plain HTTP, so it is not run here.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from chaosproxy.control.api import ChaosProxy
from tests.support.node import NodeRunner
from tests.support.realtime_clients import mock_text
from tests.support.repo import REPO

NODE_DIR = REPO / "tests" / "node"
DEADLINE_MS = 1500


def _why_skip() -> str | None:
    if shutil.which("node") is None:
        return "`node` is not on PATH (the Node client tests need Node >= 20)"
    if not (NODE_DIR / "node_modules" / "ws").is_dir():
        return "tests/node/node_modules/ws is absent: run `npm ci --prefix tests/node`"
    return None


_SKIP = _why_skip()
pytestmark = [pytest.mark.node, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

UTF8_TEXT = "Café crème, 日本語, and 👍🏽 for the realtime stream."


@pytest.fixture(scope="module")
def proxy() -> Iterator[ChaosProxy]:
    with ChaosProxy() as running:
        yield running


def run(node: NodeRunner, proxy: ChaosProxy, scenario: str) -> dict[str, Any]:
    settings = {
        "CHAOS_URL": proxy.url,
        "CHAOS_SCENARIO": scenario,
        "CHAOS_TIMEOUT_MS": str(DEADLINE_MS),
    }
    record = node.run("realtime-ws", settings, timeout=DEADLINE_MS / 1000 + 30)
    assert record["scenario"] == scenario
    return record


def deltas(record: dict[str, Any]) -> list[str]:
    return [e for e in record["events"] if e.startswith("text:")]


def test_ws_assembles_exactly_the_mocks_answer(node_runner: NodeRunner, proxy: ChaosProxy) -> None:
    record = run(node_runner, proxy, "none")
    assert (record["ended"], record["error"], record["text"]) == (True, None, mock_text())
    assert record["events"][-1] == "response.done"


def test_fragmented_utf8_ws_joins_the_frames(node_runner: NodeRunner, proxy: ChaosProxy) -> None:
    record = run(node_runner, proxy, "realtime-fragmented-utf8")
    assert (record["ended"], record["text"]) == (True, UTF8_TEXT)


def test_close_1011_ws_emits_close_with_the_code_and_reason(
    node_runner: NodeRunner, proxy: ChaosProxy
) -> None:
    record = run(node_runner, proxy, "realtime-close-1011-mid-response")
    assert record["error"] == {"name": "Closed", "message": "internal server error", "code": 1011}
    assert len(deltas(record)) == 2 and "response.done" not in record["events"]


def test_no_close_frame_ws_emits_close_1006(node_runner: NodeRunner, proxy: ChaosProxy) -> None:
    record = run(node_runner, proxy, "realtime-no-close-frame")
    assert record["error"] == {"name": "Closed", "message": "", "code": 1006}
    assert record["text"] == mock_text() and "response.done" not in record["events"]


def test_duplicated_delta_ws_shows_the_piece_twice(
    node_runner: NodeRunner, proxy: ChaosProxy
) -> None:
    record = run(node_runner, proxy, "realtime-duplicated-delta")
    assert record["ended"] and len(deltas(record)) == 5
    assert record["text"] != mock_text()


def test_missing_done_ws_waits_until_the_deadline(
    node_runner: NodeRunner, proxy: ChaosProxy
) -> None:
    record = run(node_runner, proxy, "realtime-missing-done")
    assert (record["hung"], record["ended"], record["error"]) == (True, False, None)
    assert record["text"] == mock_text()

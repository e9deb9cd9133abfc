"""Record-on-miss (``serve --record-on-miss FILE --record-upstream URL``), on real
sockets: the built-in mock sends a request no fixture matches to the real upstream
once, passes its answer on, appends its fixture to FILE and answers every later such
request from it (the upstream sees no second request), across a restart too; an error
status is passed on and not recorded (the next request goes upstream again); a
fixture that matches answers first; the settings are refused at start when they cannot
work."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from chaosproxy.core.answer import fold, piece_of
from chaosproxy.core.framing import make_framer
from chaosproxy.core.providers import get_profile
from chaosproxy.scenario import load_fixture_files
from chaosproxy.server.net import StartupError
from tests.support.cli import start_serve, stop_serve
from tests.support.proxies import ProxyFactory
from tests.support.repo import fixture_bytes
from tests.support.scripted_upstream import Script, ScriptedUpstream

CHAT = "/v1/chat/completions"
CAPTURE = "openai_chat_tool_call_usage.sse"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
ASK: dict[str, Any] = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "Weather in New York City?"}],
    "tools": TOOLS,
}
KEY = "sk-proj-RecordOnMissSecret0123456789"
#: The client's headers: its key, and a knob of the mock's (not the real upstream's).
HEADERS = {"Authorization": f"Bearer {KEY}", "X-Mock-Interval-Ms": "0"}


def calls(body: bytes) -> tuple[str, list[str]]:
    """Text and tool-call arguments of an OpenAI Chat stream, as its profile reads it."""
    framer = make_framer("sse")
    frames = framer.feed(body) + framer.eof()
    folded = fold([(None, piece_of(get_profile("openai-chat"), f)) for f in frames], dedup=False)
    assert folded.terminal
    return folded.text, [arguments for _, arguments in folded.tools]


async def post(url: str, body: dict[str, Any] = ASK) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + CHAT, json=body, headers=HEADERS) as got,
    ):
        return got.status, dict(got.headers), await got.read()


async def test_a_miss_goes_upstream_once_then_its_fixture_answers(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "recorded.yaml"
    upstream.route(CHAT, Script(writes=[(fixture_bytes(CAPTURE), 0)]))
    settings = {"record_on_miss": str(out), "record_upstream": upstream.url}
    proxy = await make_proxy(upstream="mock", mock_interval=0.0, **settings)
    status, headers, first = await post(proxy.url)
    assert (status, first) == (200, fixture_bytes(CAPTURE))  # the real answer, unchanged
    assert "X-Mock-Fixture" not in headers
    assert len(upstream.seen) == 1
    assert upstream.seen[0].headers["Authorization"] == f"Bearer {KEY}"  # the key went on
    assert "X-Mock-Interval-Ms" not in upstream.seen[0].headers  # the mock's knob did not
    (fixture,) = load_fixture_files([str(out)])
    assert KEY not in out.read_text()
    status, headers, second = await post(proxy.url)
    assert len(upstream.seen) == 1  # no second request upstream
    assert (status, headers["X-Mock-Fixture"]) == (200, fixture.name)
    assert calls(second) == calls(first) == ("", ['{"city":"New York City"}'])
    # Another message is another miss: upstream again, a second fixture.
    status, _, _ = await post(
        proxy.url, {**ASK, "messages": [{"role": "user", "content": "Oslo?"}]}
    )
    assert (status, len(upstream.seen), len(load_fixture_files([str(out)]))) == (200, 2, 2)
    await proxy.close()
    # A new proxy on the same file answers from it, asking nobody.
    again = await make_proxy(upstream="mock", mock_interval=0.0, **settings)
    status, headers, third = await post(again.url)
    assert (status, headers["X-Mock-Fixture"], len(upstream.seen)) == (200, fixture.name, 2)
    assert calls(third) == calls(first)


async def test_an_error_status_is_passed_on_and_not_recorded(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "recorded.yaml"
    error = b'{"error": {"message": "Rate limit reached", "type": "requests"}}'
    upstream.route(
        CHAT,
        Script(writes=[(error, 0)], status=429, headers={"Content-Type": "application/json"}),
    )
    proxy = await make_proxy(upstream="mock", record_on_miss=str(out), record_upstream=upstream.url)
    for count in (1, 2):  # each time upstream: nothing was recorded
        status, _, body = await post(proxy.url)
        assert (status, body, len(upstream.seen)) == (429, error, count)
    assert not out.exists()


async def test_a_fixture_that_matches_answers_before_the_upstream(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "recorded.yaml"
    out.write_text("fixtures:\n  - name: mine\n    match: {message: New York}\n    text: Sunny.\n")
    proxy = await make_proxy(
        upstream="mock", mock_interval=0.0, record_on_miss=str(out), record_upstream=upstream.url
    )
    status, headers, _ = await post(proxy.url)
    assert (status, headers["X-Mock-Fixture"], upstream.seen) == (200, "mine", [])


async def test_serve_says_at_start_that_it_records(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "recorded.yaml"
    proc, banner = await start_serve(
        "--listen", "127.0.0.1:0", "--admin", "off", "--log", "/dev/null",
        "--record-on-miss", str(out), "--record-upstream", f"{upstream.url}/",
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        assert "listening on" in banner
        async with asyncio.timeout(10):
            notice = (await proc.stderr.readline()).decode()
    finally:
        await stop_serve(proc)
    assert notice == (
        f"chaosproxy: notice: the mock records what no fixture matches: asked of {upstream.url} "
        f"once, appended to {out} (docs/mock.md, Recording)\n"
    )


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"record_on_miss": "x.yaml"}, "--record-on-miss and --record-upstream go together"),
        ({"record_upstream": "http://127.0.0.1:9"}, "--record-on-miss and --record-upstream go"),
        (
            {
                "record_on_miss": "x.yaml",
                "record_upstream": "http://127.0.0.1:9",
                "upstream": "http://127.0.0.1:9",
            },
            "--record-on-miss records what the built-in mock has no fixture for",
        ),
    ],
)
async def test_settings_that_cannot_work_are_refused_at_start(
    make_proxy: ProxyFactory, settings: dict[str, str], why: str
) -> None:
    with pytest.raises(StartupError, match=why):
        await make_proxy(**settings)

"""The Python API (``ChaosProxy``) and the ``chaos_proxy`` pytest fixture."""

from __future__ import annotations

import httpx
import openai
import pytest

import chaosproxy
from chaosproxy import ChaosProxy
from tests.conftest import REPO

CHAT = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "Tell me about rivers."}],
}


def test_public_names_are_exactly_these() -> None:
    assert set(chaosproxy.__all__) == {"ChaosProxy", "__version__"}
    assert all(hasattr(chaosproxy, name) for name in chaosproxy.__all__)


def test_sync_context_manager_serves_from_a_background_thread() -> None:
    with ChaosProxy(mock_interval=0.001) as proxy:
        with httpx.Client(base_url=proxy.url) as client:
            clean = client.post("/v1/chat/completions", json=CHAT)
            faulty = client.post(
                "/v1/chat/completions",
                json=CHAT,
                headers={"X-Chaos-Scenario": "drop-third-delta"},
            )
        request_id = faulty.headers["X-Chaos-Request-Id"]
        summary = proxy.summary(request_id)
        assert summary["faults_applied"] == {"drop": 1}
        assert sum(f["size"] for f in proxy.frames(request_id)) == len(faulty.content)
        assert len(faulty.content) < len(clean.content)
    with pytest.raises(RuntimeError, match="not running"):
        _ = proxy.url


async def test_async_context_manager_with_the_openai_sdk() -> None:
    async with ChaosProxy(mock_interval=0.001) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="test")
        stream = await client.chat.completions.create(
            **CHAT, extra_headers={"X-Chaos-Scenario": "duplicate-third-delta"}
        )
        deltas = [c.choices[0].delta.content async for c in stream if c.choices]
        await client.close()
    texts = [d for d in deltas if d]
    assert texts[2] == texts[3]  # the third text delta, twice in a row


def test_an_unknown_default_scenario_fails_the_with_block() -> None:
    with pytest.raises(Exception, match="unknown-default"), ChaosProxy(scenario="unknown-default"):
        pass


def test_the_pytest_fixture_is_registered(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this checkout, not an installed copy
    pytester.makepyfile(
        """
        import httpx

        def test_through_the_fixture(chaos_proxy):
            r = httpx.post(
                chaos_proxy.url + "/api/generate",
                json={"model": "llama3.2", "prompt": "hi"},
                headers={"X-Chaos-Scenario": "cut-before-terminal-close"},
            )
            lines = r.text.splitlines()
            assert lines and all('"done":true' not in line for line in lines)
            assert chaos_proxy.summary(r.headers["X-Chaos-Request-Id"])["outcome"] == "cut"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)

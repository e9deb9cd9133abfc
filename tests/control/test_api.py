"""The Python API (``ChaosProxy``) and the ``chaos_proxy`` pytest fixture."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

import chaosproxy
from chaosproxy import ChaosClient, ChaosProxy
from chaosproxy.control.api import EMBEDDED
from chaosproxy.control.client import ChaosAuthError, ChaosClientError
from chaosproxy.control.start import start_proxy
from chaosproxy.scenario import ScenarioError, load_library
from chaosproxy.scenario.selection import UnknownScenario
from tests.support.ports import refused_port
from tests.support.repo import REPO

CHAT = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "Tell me about rivers."}],
}


def test_public_names_are_exactly_these() -> None:
    # As httpx's tests/test_exported_members.py: __all__ is exactly what the package
    # means to export, and each name is there (imported lazily).
    assert chaosproxy.__all__ == ["ChaosClient", "ChaosProxy", "__version__"]
    assert chaosproxy.ChaosProxy is ChaosProxy
    assert chaosproxy.ChaosClient is ChaosClient
    assert set(chaosproxy.__all__) <= set(dir(chaosproxy))  # lazy, but listed
    assert chaosproxy.__version__ == "0.1.0"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = chaosproxy.Nope


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


def test_the_requests_begun_are_counted_and_awaited() -> None:
    with ChaosProxy(mock_interval=0.001) as proxy:
        before = proxy.requests_begun()
        assert proxy.wait_begun(before, 0) is False  # none yet: no wait
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(proxy.wait_begun(before, 30)))
        waiter.start()
        with httpx.Client(base_url=proxy.url) as client:
            client.post("/v1/chat/completions", json=CHAT)
        waiter.join()
        assert result == [True]
        assert proxy.requests_begun() == before + 1


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


@pytest.mark.slow
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


# --------------------------------------------------------------------------- library


def test_the_library_is_loaded_and_a_same_name_file_overrides_it(tmp_path: Path) -> None:
    mine = "description: mine\nfaults:\n  - drop: {kind: delta}\n"
    (tmp_path / "drop-third-delta.yaml").write_text(mine)
    settings = {"mock_interval": 0.001, "mock_tokens": TOKENS}
    with ChaosProxy(scenarios=[tmp_path], **settings) as proxy, httpx.Client() as http:
        r = http.post(
            proxy.url + "/v1/chat/completions",
            json=CHAT,
            headers={"X-Chaos-Scenario": "reverse-two-deltas"},  # built in
        )
        assert r.status_code == 200
        mine = http.post(
            proxy.url + "/v1/chat/completions",
            json=CHAT,
            headers={"X-Chaos-Scenario": "drop-third-delta"},
        )
        summary = proxy.summary(mine.headers["X-Chaos-Request-Id"])
    assert summary["faults_applied"] == {"drop": TOKENS}  # every delta: mine, not the library's


async def test_start_proxy_loads_the_library_first_and_an_empty_directory_is_fine(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").mkdir()  # the container's /scenarios when nothing is mounted
    (tmp_path / "mine.yaml").write_text("faults: [drop]\n")
    config = EMBEDDED.replace(scenarios=(str(tmp_path / "empty"), str(tmp_path / "mine.yaml")))
    proxy = await start_proxy(config)
    try:
        assert list(proxy.state.scenarios.scenarios) == [*load_library(), "mine"]
    finally:
        await proxy.close()


def test_a_duplicate_among_the_users_own_files_is_still_a_problem(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: same\nfaults: [drop]\n")
    (tmp_path / "b.yaml").write_text("name: same\nfaults: [drop]\n")
    with pytest.raises(ScenarioError) as info:
        ChaosProxy(scenarios=[tmp_path])
    assert [str(p) for p in info.value.problems] == [
        f"{tmp_path / 'b.yaml'}:1: name: duplicate scenario name 'same' "
        f"(also in {tmp_path / 'a.yaml'}:1)"
    ]


# --------------------------------------------------------------------------- run time

TOKENS = 6
ECHO = "provider: openai-chat\nfaults:\n  - drop: {kind: delta, nth: 1}\n"


def post(http: httpx.Client, url: str, **headers: str) -> httpx.Response:
    r = http.post(url + "/v1/chat/completions", json=CHAT, headers=headers)
    assert r.status_code == 200, r.text
    return r


@pytest.fixture
def proxy() -> Iterator[ChaosProxy]:
    with ChaosProxy(mock_interval=0.001, mock_tokens=TOKENS, admin=("127.0.0.1", 0)) as p:
        yield p


def test_use_sets_and_clears_the_default(proxy: ChaosProxy) -> None:
    with httpx.Client() as http:
        proxy.use("drop-third-delta")
        post(http, proxy.url)
        assert proxy.last()["scenario"] == "drop-third-delta"
        proxy.use(None)
        post(http, proxy.url)
        assert proxy.last()["scenario"] is None
    with pytest.raises(UnknownScenario, match="unknown scenario 'nope'"):
        proxy.use("nope")


def test_add_scenario_from_yaml_or_a_mapping(proxy: ChaosProxy) -> None:
    assert proxy.add_scenario(ECHO, name="first-gone") == "first-gone"
    mapping = {"name": "second-gone", "faults": [{"drop": {"kind": "delta", "nth": 2}}]}
    assert proxy.add_scenario(mapping) == "second-gone"
    with pytest.raises(ScenarioError) as info:
        proxy.add_scenario("faults: [nope]\n", name="bad")
    [problem] = [str(p) for p in info.value.problems]
    assert problem.startswith("add_scenario:1: faults[0]: unknown fault 'nope'; known faults: ")
    with pytest.raises(ValueError, match="name 'other' given, but the scenario says"):
        proxy.add_scenario(mapping, name="other")
    with httpx.Client() as http:
        r = post(http, proxy.url, **{"X-Chaos-Scenario": "second-gone"})
    assert proxy.summary(r.headers["X-Chaos-Request-Id"])["faults_applied"] == {"drop": 1}


def test_a_scenario_block_sets_the_default_and_restores_it(proxy: ChaosProxy) -> None:
    proxy.use("drop-third-delta")
    with httpx.Client() as http:
        with proxy.scenario("reverse-two-deltas") as name:
            assert name == "reverse-two-deltas"
            post(http, proxy.url)
        with proxy.scenario(ECHO) as inline:
            assert inline == "block-1"
            post(http, proxy.url)
        assert "block-1" not in proxy._set.snapshot()[0]  # added for the block only
        post(http, proxy.url)
    assert [r["scenario"] for r in proxy.requests()] == [
        "reverse-two-deltas",
        "block-1",
        "drop-third-delta",
    ]


def test_a_scenario_block_puts_back_the_scenario_it_replaced(proxy: ChaosProxy) -> None:
    library = load_library()
    with proxy.scenario("name: drop-third-delta\nfaults: [drop]\n"):
        assert proxy._set.get("drop-third-delta").faults != library["drop-third-delta"].faults
    assert proxy._set.get("drop-third-delta") == library["drop-third-delta"]
    assert proxy._set.snapshot()[1] is None


def test_requests_last_summary_and_frames(proxy: ChaosProxy) -> None:
    with httpx.Client() as http:
        a = post(http, proxy.url, **{"X-Chaos-Scenario": "drop-third-delta"})
        b = post(http, proxy.url)
        c = post(http, proxy.url, **{"X-Chaos-Scenario": "drop-third-delta"})
    ids = [r.headers["X-Chaos-Request-Id"] for r in (a, b, c)]
    finished = proxy.requests()
    assert [r["request_id"] for r in finished] == ids  # oldest first
    assert [r["request_id"] for r in proxy.requests("drop-third-delta")] == [ids[0], ids[2]]
    last = proxy.last()
    assert last == finished[-1] == proxy.summary(ids[2])
    # the request line's fields and the response_end line's, without "event"
    assert (last["method"], last["path"], last["outcome"]) == (
        "POST",
        "/v1/chat/completions",
        "completed",
    )
    assert "event" not in last
    assert sum(f["size"] for f in proxy.frames(ids[2])) == len(c.content) == last["bytes"]


def test_last_before_any_request_is_a_lookup_error(proxy: ChaosProxy) -> None:
    with pytest.raises(LookupError, match="no request has gone through the proxy yet"):
        proxy.last(settle=0)


def test_runtime_calls_want_a_running_proxy() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        ChaosProxy().use(None)


# --------------------------------------------------------------------------- ChaosClient


def test_chaos_client_offers_the_same_calls_over_the_admin_api(proxy: ChaosProxy) -> None:
    assert proxy.admin_url is not None
    chaos = ChaosClient(proxy.admin_url)
    with httpx.Client() as http:
        chaos.use("drop-third-delta")
        a = post(http, proxy.url)
        assert chaos.last()["request_id"] == a.headers["X-Chaos-Request-Id"]
        chaos.use(None)
        assert chaos.add_scenario(ECHO, name="first-gone") == "first-gone"
        b = post(http, proxy.url, **{"X-Chaos-Scenario": "first-gone"})
        with chaos.scenario("reverse-two-deltas"):
            c = post(http, proxy.url)
        with chaos.scenario({"faults": ["drop"]}) as inline:
            assert inline == "block-1"
            post(http, proxy.url)
        assert "block-1" not in {s["name"] for s in chaos.scenarios()}
        assert chaos.default() is None
    ids = [r.headers["X-Chaos-Request-Id"] for r in (a, b, c)]
    assert [r["request_id"] for r in chaos.requests()][:3] == ids
    assert [r["request_id"] for r in chaos.requests("first-gone")] == ids[1:2]
    for request_id in ids:
        assert chaos.summary(request_id) == proxy.summary(request_id)
        assert chaos.frames(request_id) == [
            {k: v for k, v in f.items() if k not in ("event", "request_id", "scenario")}
            for f in proxy.frames(request_id)
        ]
    with pytest.raises(KeyError):
        chaos.summary("r-nope")
    with pytest.raises(ChaosClientError) as info:
        chaos.add_scenario("faults: [nope]\n", name="bad")
    assert info.value.status == 400 and info.value.problems
    chaos.reset()
    assert chaos.requests() == []


def test_chaos_client_says_clearly_when_it_wants_a_token() -> None:
    settings = {"admin": ("127.0.0.1", 0), "admin_token": "s3cret"}
    with ChaosProxy(**settings) as proxy:
        assert proxy.admin_url is not None
        with pytest.raises(ChaosAuthError) as info:
            ChaosClient(proxy.admin_url).use(None)
        assert info.value.status == 401
        assert "401 Unauthorized: no token was given" in str(info.value)
        assert "--admin-token" in str(info.value)
        with pytest.raises(ChaosAuthError, match="the token was refused"):
            ChaosClient(proxy.admin_url, token="wrong").use(None)
        ChaosClient(proxy.admin_url, token="s3cret").use("drop-third-delta")
        assert "s3cret" not in repr(ChaosClient(proxy.admin_url, token="s3cret"))


def test_chaos_client_cannot_reach() -> None:
    with (
        refused_port() as port,
        pytest.raises(ChaosClientError, match="cannot reach the chaosproxy admin API"),
    ):
        ChaosClient(f"http://127.0.0.1:{port}").use(None)


# --------------------------------------------------------------------------- the plugin


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this checkout's plugin, not an installed one


@pytest.mark.slow
def test_the_chaos_marker_sets_the_default_scenario(
    pytester: pytest.Pytester, plugin_env: None
) -> None:
    pytester.makepyfile(
        """
        import httpx
        import pytest

        CHAT = {"model": "gpt-4o", "stream": True, "messages": []}

        @pytest.mark.chaos("drop-third-delta")
        def test_marked(chaos_proxy):
            httpx.post(chaos_proxy.url + "/v1/chat/completions", json=CHAT)
            assert chaos_proxy.last()["scenario"] == "drop-third-delta"

        @pytest.mark.chaos("faults: [drop]")
        def test_marked_with_yaml(chaos_proxy):
            httpx.post(chaos_proxy.url + "/v1/chat/completions", json=CHAT)
            assert chaos_proxy.last()["scenario"] == "block-1"

        def test_unmarked(chaos_proxy):
            httpx.post(chaos_proxy.url + "/v1/chat/completions", json=CHAT)
            assert chaos_proxy.last()["scenario"] is None

        @pytest.mark.chaos("drop-third-delt")
        def test_unknown(chaos_proxy):
            pass

        @pytest.mark.chaos("faults: [dorp]")
        def test_invalid(chaos_proxy):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=3, errors=2)
    # Each is one line, with its did-you-mean: no traceback through the plugin.
    out = result.stdout.str()
    for test, line in [
        (
            "test_unknown",
            "@pytest.mark.chaos('drop-third-delt'): unknown scenario 'drop-third-delt' "
            "(did you mean 'drop-third-delta'?)",
        ),
        (
            "test_invalid",
            "@pytest.mark.chaos('faults: [dorp]'): add_scenario:1: faults[0]: unknown fault "
            "'dorp' (did you mean 'drop'?)",
        ),
    ]:
        section = out.split(f" ERROR at setup of {test} ")[1].split("\n")[1:]
        end = next(i for i, text in enumerate(section) if text.startswith("_") or "=====" in text)
        assert len(section[:end]) == 1, section[:end]
        assert section[0] == line
    assert "Traceback" not in out and "UnknownScenario" not in out


def test_the_marker_is_registered(pytester: pytest.Pytester, plugin_env: None) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.chaos(scenario): the default scenario of*"])


@pytest.mark.slow
def test_one_proxy_for_the_session(pytester: pytest.Pytester, plugin_env: None) -> None:
    pytester.makepyfile(
        """
        URLS = []

        def test_one(chaos_proxy_session):
            URLS.append(chaos_proxy_session.url)

        def test_two(chaos_proxy_session):
            URLS.append(chaos_proxy_session.url)
            assert URLS[0] == URLS[1]
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


PLUGIN_SETTINGS = """
    import httpx

    def test_settings(chaos_proxy):
        r = httpx.post(
            chaos_proxy.url + "/v1/chat/completions",
            json={"model": "gpt-4o", "stream": True, "messages": []},
            headers={"X-Chaos-Scenario": "mine"},
        )
        assert r.status_code == 200
        assert r.content == b"from the upstream"
    """


@pytest.fixture
def fixed_upstream() -> Iterator[str]:
    """A tiny upstream that always answers the same body, in its own thread."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"from the upstream"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_options_give_the_upstream_and_scenarios(
    pytester: pytest.Pytester, plugin_env: None, fixed_upstream: str
) -> None:
    pytester.makefile(".yaml", mine="format: raw\nfaults: [{rechunk: {size: 1}}]\n")
    pytester.makepyfile(PLUGIN_SETTINGS)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--chaos-upstream",
        fixed_upstream,
        "--chaos-scenarios",
        "mine.yaml",
    )
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_ini_keys_give_the_upstream_and_scenarios(
    pytester: pytest.Pytester, plugin_env: None, fixed_upstream: str
) -> None:
    pytester.mkdir("chaos")
    (pytester.path / "chaos" / "mine.yaml").write_text(
        "format: raw\nfaults: [{rechunk: {size: 1}}]\n"
    )
    pytester.makeini(
        f"""
        [pytest]
        chaos_upstream = {fixed_upstream}
        chaos_scenarios = chaos
        """
    )
    pytester.makepyfile(PLUGIN_SETTINGS)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize("content", [False, True])
def test_the_journal_keeps_the_prompts_only_with_log_content(content: bool) -> None:
    from chaosproxy.observe.journal import ContentNotKept, VerificationError

    with ChaosProxy(log_content=content, mock_tokens=2, admin=("127.0.0.1", 0)) as proxy:
        httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=10).read()
        (summary,) = proxy.verify(count=1, model="gpt-4o")  # (what is always kept)
        messages = summary["request"]["messages"]
        assert isinstance(messages, list)
        client = ChaosClient(admin_url_of(proxy))
        if content:
            assert messages == [{"role": "user", "text": "Tell me about rivers."}]
            proxy.verify(count=1, contains="rivers")
            client.verify(count=1, contains="rivers")
            with pytest.raises(VerificationError):
                proxy.verify(contains="lakes")
        else:
            assert messages[0].get("chars") == len("Tell me about rivers.")
            assert "text" not in messages[0] and "body" not in summary["request"]
            for verify in (proxy.verify, client.verify):
                with pytest.raises(ContentNotKept, match="--log-content"):
                    verify(contains="rivers")
            with pytest.raises(ChaosClientError, match="--log-content") as info:
                client.requests(contains="rivers")  # (the admin refuses it: 400)
            assert info.value.status == 400


def admin_url_of(proxy: ChaosProxy) -> str:
    assert proxy.admin_url is not None
    return proxy.admin_url

"""The headless-Chromium harness (tests/support/browser.py) itself: start, evaluate, wait,
screenshot, cross-origin, and that it always cleans up."""

from __future__ import annotations

import os
import struct
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.support.browser import (
    Chromium,
    JavaScriptError,
    chromium_path,
    find_chromium,
    require_chromium,
)

__all__ = ["chromium_path"]  # the fixture, imported for the tests below


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


async def _serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


PAGE = b"""<!doctype html><title>harness</title>
<body style="margin:0"><div id="box" style="width:300px;height:2000px;background:#c00"></div>
<script>
console.log("hello", 42);
setTimeout(() => { document.body.dataset.ready = "yes"; }, 50);
</script></body>"""


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html")

    async def data(_: web.Request) -> web.Response:
        return web.json_response({"answer": 42})  # no CORS header

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/data", data)
    async for url in _serve(app):
        yield url


@pytest.mark.browser
async def test_open_evaluate_wait_screenshot(chromium_path: str, site: str) -> None:
    async with Chromium(executable=chromium_path, window_size=(800, 600)) as browser:
        page = await browser.open(site + "/")
        assert await page.evaluate("document.title") == "harness"
        assert await page.evaluate("Promise.resolve(6 * 7)", await_promise=True) == 42
        # Set by a timer after load: waited for, not slept for.
        assert await page.wait_for("document.body.dataset.ready") == "yes"
        assert ("log", "hello 42") in page.console
        viewport = await page.screenshot(full_page=False)
        assert png_size(viewport) == (800, 600)
        whole = await page.screenshot()
        assert png_size(whole)[1] == 2000


@pytest.mark.browser
async def test_errors_and_timeouts_are_raised(chromium_path: str, site: str) -> None:
    async with Chromium(executable=chromium_path) as browser:
        page = await browser.open(site + "/")
        with pytest.raises(JavaScriptError, match="boom"):
            await page.evaluate("(() => { throw new Error('boom'); })()")
        with pytest.raises(JavaScriptError, match="nope"):
            await page.evaluate("Promise.reject(new Error('nope'))", await_promise=True)
        with pytest.raises(TimeoutError, match=r"window\.neverSet"):
            await page.wait_for("window.neverSet", limit=0.2)


@pytest.mark.browser
async def test_cross_origin_needs_disable_web_security(chromium_path: str, site: str) -> None:
    # The page is on localhost, the JSON on 127.0.0.1 without CORS headers.
    other = site.replace("127.0.0.1", "localhost")
    fetch = f"fetch({site + '/data'!r}).then(r => r.json()).then(j => j.answer)"
    async with Chromium(executable=chromium_path) as browser:
        page = await browser.open(other + "/")
        with pytest.raises(JavaScriptError, match="Failed to fetch"):
            await page.evaluate(fetch, await_promise=True)
    async with Chromium(executable=chromium_path, disable_web_security=True) as browser:
        page = await browser.open(other + "/")
        assert await page.evaluate(fetch, await_promise=True) == 42


@pytest.mark.browser
async def test_close_kills_the_process_group_and_removes_the_profile(chromium_path: str) -> None:
    browser = Chromium(executable=chromium_path)
    async with browser:
        assert browser.process is not None and browser.profile is not None
        pid, profile = browser.process.pid, browser.profile
        assert os.path.isdir(profile)  # noqa: ASYNC240 - a test check, instant
        page = await browser.open()
        assert await page.evaluate("1 + 1") == 2
    assert not os.path.exists(profile)  # noqa: ASYNC240 - a test check, instant
    assert browser.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # no process of the group is left


@pytest.mark.browser
async def test_close_after_a_failure_inside_the_block(chromium_path: str) -> None:
    browser = Chromium(executable=chromium_path)
    with pytest.raises(RuntimeError, match="inside"):
        async with browser:
            raise RuntimeError("inside")
    assert browser.profile is None and browser.process is not None
    assert browser.process.returncode is not None


def test_missing_chromium_skips_or_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSPROXY_CHROMIUM", "/nonexistent/chromium")
    assert find_chromium() is None
    monkeypatch.delenv("CHAOSPROXY_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        require_chromium()
    monkeypatch.setenv("CHAOSPROXY_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="CHAOSPROXY_REQUIRE_CHROMIUM=1"):
        require_chromium()

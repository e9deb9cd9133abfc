"""A small headless-Chromium harness over the DevTools protocol, for tests.

No new dependency: Chromium is started with ``--remote-debugging-port=0``, the DevTools
URL is read from its stderr (``DevTools listening on ws://...``) and the protocol is
spoken over aiohttp's websocket client, one browser connection with flattened target
sessions::

    async with Chromium() as browser:
        page = await browser.open(url)
        await page.wait_for("document.querySelectorAll('svg').length > 0")
        value = await page.evaluate("fetch('/x').then(r => r.status)", await_promise=True)
        png = await page.screenshot()

Chromium runs in its own process group with a fresh profile directory; both are gone
when the ``async with`` block ends, whatever happened inside it.

Tests get the executable from :func:`require_chromium` (or the ``chromium_path``
fixture of the tests that import it): it skips with the reason when no Chromium is
installed, and fails instead when ``CHAOSPROXY_REQUIRE_CHROMIUM=1`` (CI sets it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

import aiohttp
import pytest

#: Executables tried in order (``CHAOSPROXY_CHROMIUM`` overrides them).
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

#: What Chromium needs to start as root on a machine without a network, display or bus.
BASE_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
)

_DEVTOOLS_URL = re.compile(rb"DevTools listening on (ws://\S+)")


class BrowserError(Exception):
    """Chromium did not start, or a DevTools command failed."""


class JavaScriptError(BrowserError):
    """An evaluated expression threw (or its promise rejected)."""


def find_chromium() -> str | None:
    """The Chromium executable: ``CHAOSPROXY_CHROMIUM`` if set, else the first on PATH."""
    override = os.environ.get("CHAOSPROXY_CHROMIUM")
    if override:
        return shutil.which(override) or (override if os.access(override, os.X_OK) else None)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_required() -> bool:
    return os.environ.get("CHAOSPROXY_REQUIRE_CHROMIUM", "") not in ("", "0")


def require_chromium() -> str:
    """The executable, or skip the test (fail under ``CHAOSPROXY_REQUIRE_CHROMIUM=1``)."""
    path = find_chromium()
    if path is None:
        reason = (
            "Chromium is not installed (looked for CHAOSPROXY_CHROMIUM, "
            + ", ".join(CANDIDATES)
            + "); on Debian: apt-get install chromium"
        )
        if chromium_required():
            pytest.fail(f"CHAOSPROXY_REQUIRE_CHROMIUM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return path


@pytest.fixture
def chromium_path() -> str:
    """Import this fixture into a test module to skip (or fail in CI) without Chromium."""
    return require_chromium()


class _Connection:
    """One DevTools websocket: numbered commands answered by id, events to listeners."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._reader = asyncio.create_task(self._read())

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
        limit: float = 30.0,
    ) -> dict[str, Any]:
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        try:
            await self._ws.send_str(json.dumps(message))
            async with asyncio.timeout(limit):
                reply = await future
        finally:
            self._pending.pop(msg_id, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def listen(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self._listeners.append(callback)

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                if "id" in data:
                    future = self._pending.get(data["id"])
                    if future is not None and not future.done():
                        future.set_result(data)
                else:
                    for callback in list(self._listeners):
                        callback(data)
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(BrowserError("DevTools connection closed"))

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class Page:
    """One tab. ``console`` and ``errors`` collect what the page logged and threw."""

    def __init__(self, conn: _Connection, target_id: str, session_id: str) -> None:
        self._conn = conn
        self.target_id = target_id
        self.session_id = session_id
        #: ``(type, text)`` of every console call, in order (``console.log`` is "log").
        self.console: list[tuple[str, str]] = []
        #: The text of every uncaught exception.
        self.errors: list[str] = []
        self._load = asyncio.Event()
        conn.listen(self._on_event)

    def _on_event(self, data: dict[str, Any]) -> None:
        if data.get("sessionId") != self.session_id:
            return
        method, params = data.get("method"), data.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(
                str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])
            )
            self.console.append((params.get("type", "log"), text))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(
                details.get("exception", {}).get("description") or details.get("text", "")
            )
        elif method == "Page.loadEventFired":
            self._load.set()

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A raw DevTools command in this tab's session."""
        return await self._conn.send(method, params, session_id=self.session_id)

    async def goto(self, url: str, *, limit: float = 30.0) -> None:
        """Navigate and wait for the load event."""
        self._load.clear()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")
        async with asyncio.timeout(limit):
            await self._load.wait()

    async def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """The JSON value of ``expression``; raises :class:`JavaScriptError` if it throws."""
        result = await self.send(
            "Runtime.evaluate",
            {
                "expression": expression,
                "returnByValue": True,
                "awaitPromise": await_promise,
                "userGesture": True,
            },
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise JavaScriptError(f"{text} (evaluating {expression[:200]!r})")
        return result.get("result", {}).get("value")

    async def wait_for(self, condition: str, *, limit: float = 10.0) -> Any:
        """Wait until the JS expression ``condition`` is truthy and return its value.

        Polled inside the page (every animation frame or 10 ms), bounded by ``limit`` seconds:
        a :class:`TimeoutError` names the condition.
        """
        script = (
            "new Promise((resolve, reject) => {"
            f" const end = Date.now() + {int(limit * 1000)};"
            " const tick = () => {"
            f"  let v; try {{ v = ({condition}); }} catch (e) {{ v = undefined; }}"
            "  if (v) resolve(v);"
            "  else if (Date.now() > end) reject(new Error('wait_for timed out'));"
            "  else setTimeout(tick, 10);"
            " };"
            " tick();"
            "})"
        )
        try:
            async with asyncio.timeout(limit + 5):
                return await self.evaluate(script, await_promise=True)
        except (JavaScriptError, TimeoutError) as exc:
            raise TimeoutError(f"not true within {limit}s: {condition}") from exc

    async def screenshot(self, *, full_page: bool = True) -> bytes:
        """A PNG of the viewport, or of the whole page (``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = await self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": size["width"],
                "height": size["height"],
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        result = await self.send("Page.captureScreenshot", params)
        return base64.b64decode(result["data"])

    async def close(self) -> None:
        await self._conn.send("Target.closeTarget", {"targetId": self.target_id})


async def _group_gone(pgid: int, limit: float = 5.0) -> None:
    """Wait (bounded) until no process of the group is left: its renderers and helpers
    die asynchronously after the SIGKILL, and have no event to await."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            while True:
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                await asyncio.sleep(0.01)


class Chromium:
    """Headless Chromium for the length of an ``async with`` block."""

    def __init__(
        self,
        *,
        extra_args: Iterable[str] = (),
        disable_web_security: bool = False,
        executable: str | None = None,
        window_size: tuple[int, int] = (1280, 900),
        start_timeout: float = 30.0,
        attach: str | None = None,
    ) -> None:
        """``attach``: the DevTools URL of a Chromium already running (one of
        :func:`shared_chromium`'s) to open pages in, in a browser context of their own
        (cookies, cache, storage), instead of starting one; closing leaves it running.
        """
        self.attach = attach
        self.executable = executable or require_chromium()
        #: The viewport of every page (CSS pixels, scale 1): screenshots have this size.
        self.window_size = window_size
        self.args = [*BASE_ARGS, f"--window-size={window_size[0]},{window_size[1]}"]
        if disable_web_security:
            # EventSource and fetch across origins (a page on one port, the proxy on another).
            self.args.append("--disable-web-security")
        self.args.extend(extra_args)
        self.start_timeout = start_timeout
        self.process: asyncio.subprocess.Process | None = None
        self.profile: str | None = None
        self.devtools_url: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self._conn: _Connection | None = None
        self._stderr_tail: list[bytes] = []
        self._drain: asyncio.Task[None] | None = None
        self._context: str | None = None

    async def __aenter__(self) -> Chromium:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _start(self) -> None:
        if self.attach is not None:
            self.devtools_url = self.attach
            await self._connect()
            assert self._conn is not None
            context = await self._conn.send("Target.createBrowserContext")
            self._context = context["browserContextId"]
            return
        self.profile = tempfile.mkdtemp(prefix="chaosproxy-chromium-")
        self.process = await asyncio.create_subprocess_exec(
            self.executable,
            *self.args,
            f"--user-data-dir={self.profile}",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: killed whole in close()
        )
        assert self.process.stderr is not None
        try:
            async with asyncio.timeout(self.start_timeout):
                while True:
                    line = await self.process.stderr.readline()
                    if not line:
                        raise BrowserError(
                            "Chromium exited before DevTools listened: "
                            + b"".join(self._stderr_tail[-20:]).decode(errors="replace")
                        )
                    self._stderr_tail.append(line)
                    match = _DEVTOOLS_URL.search(line)
                    if match:
                        self.devtools_url = match.group(1).decode()
                        break
        except TimeoutError:
            raise BrowserError(
                f"Chromium did not print its DevTools URL within {self.start_timeout}s"
            ) from None
        # Keep reading stderr so Chromium never blocks on a full pipe.
        self._drain = asyncio.create_task(self._drain_stderr())
        await self._connect()

    async def _connect(self) -> None:
        assert self.devtools_url is not None
        self._http = aiohttp.ClientSession()
        ws = await self._http.ws_connect(self.devtools_url, max_msg_size=0)
        self._conn = _Connection(ws)

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self._stderr_tail.append(line)
            del self._stderr_tail[:-50]

    async def open(self, url: str = "about:blank", *, limit: float = 30.0) -> Page:
        """A new tab on ``url``, loaded (its load event fired)."""
        if self._conn is None:
            raise BrowserError("Chromium is not running")
        params: dict[str, Any] = {"url": "about:blank"}
        if self._context is not None:
            params["browserContextId"] = self._context
        target = await self._conn.send("Target.createTarget", params)
        target_id = target["targetId"]
        attached = await self._conn.send(
            "Target.attachToTarget", {"targetId": target_id, "flatten": True}
        )
        page = Page(self._conn, target_id, attached["sessionId"])
        width, height = self.window_size
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        if url != "about:blank":
            await page.goto(url, limit=limit)
        return page

    async def write(self, html: str) -> Page:
        """A new blank tab with ``html`` written into it (its scripts run with the
        privileges of ``about:blank``: with ``disable_web_security``, they may fetch any
        origin)."""
        tab = await self.open("about:blank")
        await tab.evaluate(
            f"document.open(); document.write({json.dumps(html)}); document.close();"
        )
        return tab

    async def close(self) -> None:
        """Disconnect, kill Chromium's whole process group, remove its profile (an
        attached one: close the pages' browser context and disconnect)."""
        if self._conn is not None and self._context is not None:
            with contextlib.suppress(Exception):
                await self._conn.send(
                    "Target.disposeBrowserContext", {"browserContextId": self._context}
                )
            self._context = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await self.process.wait()
            await _group_gone(self.process.pid)
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
            self._drain = None
        if self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None


@contextlib.contextmanager
def shared_chromium(
    *, disable_web_security: bool = False, start_timeout: float = 30.0
) -> Iterator[str]:
    """A headless Chromium for many clients (a module's or a session's), started
    without an event loop: its DevTools URL, for ``Chromium(attach=URL)``. Killed, its
    whole process group, with its profile, when the block ends. Starting Chromium costs
    about a second of CPU and two of wall time; a page in a new context, a fraction."""
    args = [*BASE_ARGS, "--window-size=1280,900"]
    if disable_web_security:
        args.append("--disable-web-security")
    profile = tempfile.mkdtemp(prefix="chaosproxy-chromium-")
    process = subprocess.Popen(
        [require_chromium(), *args, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    stderr = process.stderr
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:  # (then drain it: Chromium never blocks on a full pipe)
        for line in stderr:
            match = _DEVTOOLS_URL.search(line)
            if match and not found:
                found.append(match.group(1).decode())
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(start_timeout) or not found:
            raise BrowserError("Chromium did not print its DevTools URL")
        yield found[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(profile, ignore_errors=True)


__all__ = [
    "BrowserError",
    "Chromium",
    "JavaScriptError",
    "Page",
    "chromium_path",
    "chromium_required",
    "find_chromium",
    "require_chromium",
    "shared_chromium",
]

"""What the proxy keeps about requests, against hostile clients (issue 39): bounded in
bytes, never the prompts without ``--log-content``, never a 500 for a deep body, and
listed without stalling the streams.

- 300 requests whose heads carry ~7 MB of header fields each (the mock answers them
  400; the journal used to keep every field whole: 1,960 MB of RSS) leave a real
  ``chaosproxy serve`` within ``RSS_MARGIN_MB`` of its idle RSS, without ``POST /reset``.
- ``GET /requests`` over a full history delays a stream in flight by no more than
  ``MAX_GAP_MS`` between two of its writes (it used to build 378 MB of JSON on the
  event loop: a 12.85 s gap).
- A body nested 900 levels deep is journaled as its size and hash: the request itself,
  ``GET /requests`` and ``?contains=`` all answer (they were 500s, RecursionError).
- Without ``--log-content`` no admin answer holds a prompt's text (its system prompt, its
  messages, its tools' descriptions): the journal keeps their lengths and hashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from chaosproxy.control.start import RunningProxy
from chaosproxy.observe.journal import HEADERS_KEEP, MAX_DEPTH
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO

#: The served proxy's name (its metrics' label).
REPLICA = "journal-test"

pytestmark = pytest.mark.timeout(180)

ADMIN = ("127.0.0.1", 0)
CHAT = "/v1/chat/completions"
#: serve's start-up line: the proxy's port, then the admin's.
STARTED = re.compile(r"listening on http://[\d.]+:(\d+) .* admin: http://[\d.]+:(\d+)")


def chat(text: str = "hi", **extra: Any) -> bytes:
    return orjson.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}], **extra}
    )


async def admin_get(port: int, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        raw = await resp.read()
        return resp.status, orjson.loads(raw) if resp.content_type == "application/json" else raw


# ------------------------------------------------------------------ heads of 7 MB

#: Requests, and header fields of 64,000 bytes each per request (~7 MB a head: the
#: proxy takes 128 fields of 64 KiB at most).
HEADS = 300
FIELDS = 110
FIELD_BYTES = 64_000
#: At once: the heads are read whole, so a few at a time is enough to be quick.
CONCURRENCY = 4
#: How far above its idle RSS the proxy may stay once the heads are answered: what the
#: history holds (256 entries of 16 KiB of header fields each: 4 MiB, and their
#: records) and what the allocators keep of the peak of 4 heads read at once. Measured
#: on the 2-core test machine: +9 to +14 MB (it was +1,900 MB before).
RSS_MARGIN_MB = 50.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def settled_rss(pid: int, *, every: float = 0.5, limit: float = 20.0) -> float:
    """The process's RSS once it stopped falling (the reclaimer runs every 0.5 s once
    idle): two looks a second apart agree within 1 MB."""
    last = rss_mb(pid)
    stable = 0
    async with asyncio.timeout(limit):
        while stable < 2:
            await asyncio.sleep(every)
            now = rss_mb(pid)
            stable = stable + 1 if abs(now - last) < 1.0 else 0
            last = now
    return last


async def rss_back_under(
    pid: int, bound: float, *, every: float = 0.5, limit: float = 30.0
) -> float:
    """The process's RSS once it is at most ``bound`` MB, or, after ``limit`` seconds,
    as it is then. A memory test waits for the reclaim, not for a steady RSS: on a
    loaded machine a proxy not yet scheduled since the load ended holds its RSS steady
    for seconds before its reclaimer (every 0.5 s of its loop) gets to run."""
    now = rss_mb(pid)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            while now > bound:
                await asyncio.sleep(every)
                now = rss_mb(pid)
    return now


def large_head(i: int) -> bytes:
    body = chat()
    fields = "".join(f"X-Pad-{k}: {(f'{i:06d}' * (FIELD_BYTES // 6))}\r\n" for k in range(FIELDS))
    return (
        f"POST {CHAT} HTTP/1.1\r\nHost: heads\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{fields}\r\n"
    ).encode() + body


async def send_head(port: int, i: int) -> bytes:
    """One request with a ~7 MB head; the status line of its answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(large_head(i))
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    return answer.split(b"\r\n", 1)[0]


async def start_serve(tmp_path: Path, *args: str) -> tuple[asyncio.subprocess.Process, int, int]:
    """``chaosproxy serve`` in front of the mock, its stderr in a file (the mock says
    something of every head it refuses: a pipe nobody reads would fill up)."""
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "chaosproxy", "serve", "--listen", "127.0.0.1:0",
            "--admin", "127.0.0.1:0", "--upstream", "mock", "--log-level", "requests",
            "--log", str(tmp_path / "frames.jsonl"), "--replica-id", REPLICA, *args,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    async with asyncio.timeout(20):
        while not (found := STARTED.search(stderr.read_text())):
            assert proc.returncode is None, stderr.read_text()
            await asyncio.sleep(0.05)
    return proc, int(found.group(1)), int(found.group(2))


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        async with asyncio.timeout(15):
            await proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
async def test_heads_of_7_mb_leave_the_rss_near_its_idle_level(tmp_path: Path) -> None:
    proc, port, admin = await start_serve(tmp_path)
    try:
        for i in range(5):  # warm up: first imports, the mock's first connection
            assert await send_head(port, i) == b"HTTP/1.1 400 Bad Request"
        idle = await settled_rss(proc.pid)
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> bytes:
            async with gate:
                return await send_head(port, i)

        async with asyncio.timeout(120):
            answers = await asyncio.gather(*(one(i) for i in range(HEADS)))
        assert set(answers) == {b"HTTP/1.1 400 Bad Request"}  # (the mock's: too large)
        after = await rss_back_under(proc.pid, idle + RSS_MARGIN_MB)
        print(f"RSS idle {idle:.1f} MB; after {HEADS} heads of 7 MB: {after:.1f} MB")
        assert after <= idle + RSS_MARGIN_MB, (idle, after)

        # Journaled all the same, cut to its bound, with the sizes received.
        status, page = await admin_get(admin, "/requests?limit=1")
        assert status == 200
        sent = page["requests"][0]["request"]
        truncated = sent["headers_truncated"]
        assert truncated["fields"] == FIELDS + 4  # (host, type, length, connection)
        assert truncated["bytes"] > FIELDS * FIELD_BYTES
        assert truncated["omitted"] == FIELDS - HEADERS_KEEP // (len("X-Pad-0") + 1025)
        assert sum(len(v) for v in sent["headers"].values()) < HEADERS_KEEP
        _, metrics = await admin_get(admin, "/metrics")
        evicted = f'chaosproxy_history_evicted_total{{replica="{REPLICA}",reason="count"}}'
        assert f"{evicted} {HEADS + 5 - 256}.0" in metrics.decode()
    finally:
        await stop(proc)


# ------------------------------------------------------------------ deep bodies


def nested(depth: int, where: str = "metadata") -> bytes:
    """A chat request whose ``metadata`` (or its message's ``content``) nests ``depth``
    lists deep."""
    deep = b"[" * depth + b"]" * depth
    if where == "content":
        return b'{"model":"m","stream":true,"messages":[{"role":"user","content":%s}]}' % deep
    return chat(metadata=None).replace(b'"metadata":null', b'"metadata":' + deep)


@pytest.mark.parametrize("where", ["metadata", "content"])
@pytest.mark.parametrize("content", [False, True], ids=["without-content", "log-content"])
async def test_a_body_nested_900_deep_is_kept_as_its_hash_never_a_500(
    make_proxy: ProxyFactory, log_capture: LogCapture, content: bool, where: str
) -> None:
    proxy = await make_proxy(admin=ADMIN, content=content, mock_tokens=2)
    body = nested(900, where)
    async with aiohttp.ClientSession() as s, s.post(proxy.url + CHAT, data=body) as resp:
        assert resp.status == 200  # the mock's answer, streamed (it read the body too)
        await resp.read()
        rid = resp.headers["X-Chaos-Request-Id"]
    await log_capture.wait_end(rid)
    line = log_capture.for_request(rid)[0]
    assert line["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert "body" not in line  # (with --log-content too: it cannot be read)

    status, page = await admin_get(admin_port(proxy), "/requests")
    assert status == 200
    (found,) = page["requests"]
    sent = found["request"]
    assert (sent["body_omitted"], sent["body_omitted_reason"]) == (True, "depth")
    assert (sent["body_bytes"], sent["body_sha256"]) == (len(body), line["body_sha256"])
    assert "body" not in sent and sent["model"] is None and sent["messages"] == 0
    status, page = await admin_get(admin_port(proxy), "/requests?contains=hi")
    if content:  # nothing of it to search: found by no text
        assert (status, page["requests"]) == (200, [])
    else:
        assert (status, page["error"]["type"]) == (400, "content_not_kept")
    status, detail = await admin_get(admin_port(proxy), f"/requests/{rid}")
    assert status == 200 and detail["summary"]["request"]["body_omitted_reason"] == "depth"


def admin_port(proxy: RunningProxy) -> int:
    assert proxy.admin_url is not None
    return int(proxy.admin_url.rsplit(":", 1)[1])


async def test_a_body_just_within_the_depth_is_read(
    make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    proxy = await make_proxy(admin=ADMIN, content=True, mock_tokens=2)
    body = nested(MAX_DEPTH - 1)  # (the object around it is one level more)
    async with aiohttp.ClientSession() as s, s.post(proxy.url + CHAT, data=body) as resp:
        await resp.read()
        rid = resp.headers["X-Chaos-Request-Id"]
    await log_capture.wait_end(rid)
    _, detail = await admin_get(admin_port(proxy), f"/requests/{rid}")
    sent = detail["summary"]["request"]
    assert sent["messages"] == [{"role": "user", "text": "hi"}]
    assert sent["body"] == orjson.loads(body)


# ------------------------------------------------------------------ listing a full history

#: A full history: 256 requests, each journaled with a body of 60 KB (with
#: --log-content: kept, parsed and masked again for every listing).
FULL = 256
PROMPT_CHARS = 60_000
#: The stream in flight: an event every 10 ms for 3 s.
EVENTS = 300
INTERVAL_MS = 10
#: The largest gap between two writes of that stream while the history is listed
#: (its events come every 10 ms). Before, a listing of 378 MB held the loop 12.85 s.
MAX_GAP_MS = 50.0


async def fill(port: int, count: int) -> None:
    body = chat("x" * PROMPT_CHARS)
    headers = {"X-Mock-Tokens": "1", "X-Mock-Interval-Ms": "0"}
    async with aiohttp.ClientSession() as s:
        for _ in range(count):
            async with s.post(f"http://127.0.0.1:{port}{CHAT}", data=body, headers=headers) as r:
                assert r.status == 200
                await r.read()


async def list_all(port: int) -> tuple[int, int]:
    """Every summary ``GET /requests`` lists, page after page: (summaries, pages)."""
    found = pages = 0
    cursor: str | None = None
    async with aiohttp.ClientSession() as s:
        while True:
            query = "?limit=1000" + ("" if cursor is None else f"&cursor={cursor}")
            async with s.get(f"http://127.0.0.1:{port}/requests{query}") as resp:
                page = orjson.loads(await resp.read())
            found += len(page["requests"])
            pages += 1
            cursor = page["next"]
            if cursor is None:
                return found, pages


@pytest.mark.slow
async def test_listing_a_full_history_delays_no_stream(tmp_path: Path) -> None:
    """Judged on the proxy's own write times. The machine may deschedule the proxy
    for a while whatever it does (a loaded CI runner): that only ever widens a gap, so
    the stream is measured up to five times and the best run is judged; a listing that
    held the loop widens every run's gaps alike."""
    proc, port, admin = await start_serve(tmp_path, "--log-content")
    try:
        await fill(port, FULL)
        runs = []
        for _ in range(5):
            runs.append(await stream_while_listing(port, admin))
            if runs[-1][0] <= MAX_GAP_MS:
                break
        best, listings, writes = min(runs)
        print(f"the stream's largest gap between two writes, per run: {[r[0] for r in runs]}")
        assert listings >= 2
        assert writes >= EVENTS
        assert best <= MAX_GAP_MS, runs
    finally:
        await stop(proc)


async def stream_while_listing(port: int, admin: int) -> tuple[float, int, int]:
    """One stream of EVENTS events, the whole history listed again and again while it
    runs: (its largest gap between two writes, the listings made, its writes)."""
    headers = {"X-Mock-Tokens": str(EVENTS), "X-Mock-Interval-Ms": str(INTERVAL_MS)}
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{port}{CHAT}", data=chat(), headers=headers) as resp,
    ):
        rid = resp.headers["X-Chaos-Request-Id"]
        first = await resp.content.readline()  # the stream is under way
        assert first.startswith(b"data: ")
        listings = 0
        reading = asyncio.ensure_future(resp.read())
        while not reading.done():  # list the whole history again and again
            found, pages = await list_all(admin)
            assert found >= FULL and pages > 1  # (1 MiB a page at most)
            listings += 1
        assert (await reading).rstrip().endswith(b"data: [DONE]")
    status, detail = await admin_get(admin, f"/requests/{rid}")
    assert status == 200
    times = [f["t_ms"] for f in detail["frames"]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return max(gaps), listings, len(times)


# ------------------------------------------------------------------ prompts


@pytest.mark.parametrize("content", [False, True], ids=["without-content", "log-content"])
async def test_no_admin_answer_holds_a_prompt_without_log_content(
    make_proxy: ProxyFactory, log_capture: LogCapture, content: bool
) -> None:
    proxy = await make_proxy(admin=ADMIN, content=content, mock_tokens=2)
    marker = "prompt-3f7a"
    body = orjson.dumps(
        {
            "model": "gpt-4o",
            "stream": True,
            "system": f"system {marker}",
            "messages": [{"role": "user", "content": [{"type": "text", "text": marker}]}],
            "tools": [{"name": "get_weather", "description": f"tool {marker}"}],
        }
    )
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/messages", data=body) as resp,
    ):
        await resp.read()
        rid = resp.headers["X-Chaos-Request-Id"]
    await log_capture.wait_end(rid)
    answers: dict[str, bytes] = {}
    for path in ("/health", "/scenarios", "/requests", f"/requests/{rid}", "/metrics"):
        status, answer = await admin_get(admin_port(proxy), path)
        assert status == 200, path
        answers[path] = answer if isinstance(answer, bytes) else orjson.dumps(answer)
    holding = sorted(path for path, answer in answers.items() if marker.encode() in answer)
    assert holding == (["/requests", f"/requests/{rid}"] if content else [])
    _, listed = await admin_get(admin_port(proxy), "/requests")
    sent = listed["requests"][0]["request"]
    assert (sent["model"], sent["tools"]) == ("gpt-4o", ["get_weather"])
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]

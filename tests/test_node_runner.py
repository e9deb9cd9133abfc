"""The suite's Node runner (tests/node/runner.mjs, tests/support/node.py) runs a client
as a process of its own would: each run on connections of its own, none kept past its
end; a run that outlives its deadline is reported hung and cut off, and the runner goes
on; a broken script is said, not taken for a client's behaviour."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.support.node import NODE_DIR, NodeRunner
from tests.support.scripted_upstream import until

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(
        shutil.which("node") is None or not (NODE_DIR / "node_modules").is_dir(),
        reason="node or tests/node/node_modules is absent (npm ci --prefix tests/node)",
    ),
]

EVENTS = [
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


@dataclass
class Connection:
    requests: int = 0
    closed: bool = False


@dataclass
class Upstream:
    """Chat completions over keep-alive connections, recorded a connection each; with
    ``hold``, the answer stops after its first event and waits for the client to go."""

    url: str = ""
    hold: bool = False
    connections: list[Connection] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection()
        self.connections.append(conn)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                conn.requests += 1
                events = EVENTS[:1] if self.hold else EVENTS
                body = b"".join(events)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(b"".join(EVENTS)), body)
                )
                await writer.drain()
                if self.hold:
                    await reader.read()  # until the client goes
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            conn.closed = True
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()
    server = await asyncio.start_server(up.serve, "127.0.0.1", 0)
    up.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield up


def settings(url: str, timeout_ms: int = 5000) -> dict[str, str]:
    return {"CHAOS_URL": url, "CHAOS_TIMEOUT_MS": str(timeout_ms)}


async def test_each_run_has_connections_of_its_own_closed_when_it_ends(
    upstream: Upstream, node_runner: NodeRunner
) -> None:
    for _ in range(2):
        run = await asyncio.to_thread(node_runner.run, "openai-chat", settings(upstream.url), 30)
        assert run["ended"] and run["text"] == "Hi", run
    # A pool shared by the runs would have sent the second request on the first's
    # keep-alive connection; a process of its own each never could.
    assert [c.requests for c in upstream.connections] == [1, 1]
    await until(lambda: all(c.closed for c in upstream.connections))


async def test_a_run_past_its_deadline_is_hung_cut_off_and_the_runner_goes_on(
    upstream: Upstream, node_runner: NodeRunner
) -> None:
    upstream.hold = True
    run = await asyncio.to_thread(
        node_runner.run, "openai-chat", settings(upstream.url, timeout_ms=300), 30
    )
    assert run["hung"] and not run["ended"] and run["error"] is None, run
    assert run["ms"] >= 300, run  # hung means the deadline had passed, not nearly
    assert run["events"] == ["role:assistant"]
    await until(lambda: upstream.connections[0].closed)  # as when its process exited
    upstream.hold = False
    again = await asyncio.to_thread(node_runner.run, "openai-chat", settings(upstream.url), 30)
    assert again["ended"] and again["text"] == "Hi", again


def test_a_broken_script_is_a_failure_of_the_test_not_a_client_record(
    node_runner: NodeRunner,
) -> None:
    with pytest.raises(AssertionError, match="the client script failed"):
        node_runner.run("no-such-client", settings("http://127.0.0.1:1"), 30)
    with pytest.raises(AssertionError, match="CHAOS_URL is not set"):
        node_runner.run("openai-chat", {}, 30)

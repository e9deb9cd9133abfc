"""``chaosproxy serve --workers 2`` as a process, end to end (docs/operations.md, Workers).

Every state rule of issue 27 through real sockets: requests spread over both workers
(``SO_REUSEPORT``) with ids unique across them; an admin change seen by every request
that follows, on both; ``requests: [1]`` applying to exactly one request of the whole
proxy and derived seeds counting the whole proxy's requests; ``GET /requests`` and
``/metrics`` counting every request; a verdict on a request of either worker; one frame
log, parsed line by line, holding every request's lines; a reconnect that lands on the
other worker answered from the history of the worker that keeps it (the connection
handed over); tenants isolated across workers; SIGTERM stopping every worker, every
request with its one ``response_end``.

Which worker served a request is in its id (``r-<tag>w<k>-<n>``). To land a reconnect
on the other worker, a client opens connections until a first, plain request on one is
answered by that worker, then sends the reconnect on the same keep-alive connection
(the kernel picks a worker per connection; the chance that 60 connections all land on
one worker is 2**-60).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from chaosproxy.observe.logs import COPY_ENV
from chaosproxy.scenario.selection import derive_seed
from tests.conftest import REPO, busy_port

#: Each test starts serve --workers: a supervisor and its worker processes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
SEED = 4242
GRACE = 1.0
LISTENING = re.compile(r"listening on http://([0-9.]+):(\d+) .*admin: http://([0-9.]+):(\d+)")
WORKER = re.compile(r"r-[0-9a-f]+w(\d+)-\d+")
SCENARIOS = {
    # cut after the third event; the stream is kept and reconnects resume it
    "resumable.yaml": (
        "name: resumable\nfaults:\n  - cut: {after: 3}\n"
        "requests: [1]\nresume: {policy: resume, retention: 60s}\n"
    ),
    "slow.yaml": "name: slow\nfaults:\n  - delay: {per_event: 150ms}\n",
}


@dataclass
class Served:
    """A ``serve --workers 2`` process."""

    process: subprocess.Popen[bytes]
    url: str
    admin: str
    log: Path | None
    pids: list[int]
    stderr: Path

    def lines(self) -> list[dict[str, Any]]:
        """The frame log, each line parsed on its own (a torn line fails here)."""
        assert self.log is not None
        return [orjson.loads(line) for line in self.log.read_bytes().splitlines()]


def worker_of(request_id: str) -> int:
    found = WORKER.fullmatch(request_id)
    assert found is not None, request_id
    return int(found.group(1))


def settings_free_environment() -> dict[str, str]:
    """This process's environment without chaosproxy's settings (the test gives its own
    flags), keeping the suite's frame-log copy (tests/logcheck.py)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CHAOSPROXY_") or k == COPY_ENV}


def start(tmp: Path, *extra: str, log: bool = True, stdout: Any = None) -> Served:
    scenarios = tmp / "scenarios"
    scenarios.mkdir(exist_ok=True)
    for name, text in SCENARIOS.items():
        (scenarios / name).write_text(text)
    log_path = tmp / "frames.log" if log else None
    stderr = tmp / "stderr.txt"
    argv = [
        sys.executable,
        "-m",
        "chaosproxy",
        "serve",
        "--workers",
        "2",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--scenarios",
        str(scenarios),
        "--mock-interval-ms",
        "5",
        "--seed",
        str(SEED),
        "--grace",
        f"{GRACE:g}s",
        *(["--log", str(log_path)] if log_path is not None else []),
        *extra,
    ]
    env = settings_free_environment()
    env["PYTHONPATH"] = str(REPO)
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            argv, cwd=tmp, env=env, stdout=stdout or subprocess.DEVNULL, stderr=err
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = stderr.read_text(errors="replace")
        found = LISTENING.search(text)
        if found:
            pids = [int(p) for p in re.findall(r"\d+", text.split("(pids ")[1].split(")")[0])]
            return Served(
                process,
                f"http://{found.group(1)}:{found.group(2)}",
                f"http://{found.group(3)}:{found.group(4)}",
                log_path,
                pids,
                stderr,
            )
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"serve --workers 2 did not start: {stderr.read_text()}")


def stop(served: Served) -> float:
    """SIGTERM; how long the exit took (it must come)."""
    if served.process.poll() is not None:
        return 0.0
    t0 = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    try:
        served.process.wait(timeout=GRACE + 5)
    except subprocess.TimeoutExpired:
        served.process.kill()
        raise
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start(tmp_path_factory.mktemp("workers"))
    try:
        yield served
    finally:
        stop(served)


@pytest.fixture
async def admin(served: Served) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(served.admin) as session:
        yield session


async def one(
    url: str, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None
) -> tuple[aiohttp.ClientResponse, bytes]:
    """One request on a connection of its own (the kernel picks its worker); the body
    as far as it came (a cut one too)."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.post(url + CHAT, json=body or BODY, headers=headers) as response,
    ):
        received = bytearray()
        try:
            async for data in response.content.iter_any():
                received += data
        except aiohttp.ClientPayloadError:
            pass
        return response, bytes(received)


async def many(url: str, n: int, headers: dict[str, str] | None = None) -> list[Any]:
    return await asyncio.gather(*(one(url, headers) for _ in range(n)))


async def until_logged(served: Served, ids: set[str], event: str = "response_end") -> None:
    """Until the log has an ``event`` line for every id (the workers flush every
    0.25 s), 10 s at most."""
    deadline = time.monotonic() + 10
    while True:
        seen = {line.get("request_id") for line in served.lines() if line["event"] == event}
        if ids <= seen or time.monotonic() > deadline:
            assert ids <= seen, sorted(ids - seen)
            return
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- tests


async def test_requests_spread_over_both_workers_with_unique_ids_and_one_log(
    served: Served,
) -> None:
    answers = await many(served.url, 40)
    ids = [r.headers["X-Chaos-Request-Id"] for r, _ in answers]
    assert len(set(ids)) == len(ids)
    assert {worker_of(i) for i in ids} == {0, 1}, Counter(worker_of(i) for i in ids)
    assert all(r.status == 200 and body.endswith(b"data: [DONE]\n\n") for r, body in answers)
    await until_logged(served, set(ids))
    lines = served.lines()  # every line parses on its own: no line torn or merged
    for request_id, (_, body) in zip(ids, answers, strict=True):
        mine = [line for line in lines if line.get("request_id") == request_id]
        assert [line["event"] for line in mine].count("request") == 1
        ends = [line for line in mine if line["event"] == "response_end"]
        assert len(ends) == 1
        frames = [line for line in mine if line["event"] == "frame"]
        assert sum(f["size"] for f in frames) == ends[0]["bytes"] == len(body)


async def test_an_admin_change_reaches_every_worker_before_the_call_returns(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    for round_ in range(3):
        name = f"marked-{round_}"
        scenario = f"name: {name}\nfaults:\n  - headers: {{set: {{X-Mark: m{round_}}}}}\n"
        async with admin.post(
            "/scenarios", data=scenario, headers={"Content-Type": "application/yaml"}
        ) as r:
            assert r.status == 201, await r.text()
        async with admin.put("/default", json={"scenario": name}) as r:
            assert r.status == 200
        # At once, on fresh connections: every worker already has it.
        answers = await many(served.url, 16)
        assert {r.headers.get("X-Mark") for r, _ in answers} == {f"m{round_}"}
        ids = [r.headers["X-Chaos-Request-Id"] for r, _ in answers]
        assert {worker_of(i) for i in ids} == {0, 1}
        async with admin.delete(f"/scenarios/{name}") as r:
            assert r.status == 200
        answers = await many(served.url, 16)
        assert {r.headers.get("X-Mark") for r, _ in answers} == {None}
        assert {r.headers["X-Chaos-Scenario"] for r, _ in answers} == {"none"}


async def test_ordinals_and_seeds_count_the_whole_proxy(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    scenario = "name: once\nrequests: [1]\nfaults:\n  - headers: {set: {X-Once: hit}}\n"
    async with admin.post(
        "/scenarios", data=scenario, headers={"Content-Type": "application/yaml"}
    ) as r:
        assert r.status == 201
    async with admin.post("/reset", json={}) as r:
        assert r.status == 200
    # /reset removed it (a runtime scenario): add it again, counting from 1.
    async with admin.post(
        "/scenarios", data=scenario, headers={"Content-Type": "application/yaml"}
    ) as r:
        assert r.status == 201
    answers = await many(served.url, 30, {"X-Chaos-Scenario": "once"})
    ids = [r.headers["X-Chaos-Request-Id"] for r, _ in answers]
    assert {worker_of(i) for i in ids} == {0, 1}
    assert [r.headers.get("X-Once") for r, _ in answers].count("hit") == 1
    # Derived seeds: request numbers 1..30 of the whole proxy since the reset, each once.
    seeds = {int(r.headers["X-Chaos-Seed"]) for r, _ in answers}
    assert seeds == {derive_seed(SEED, n) for n in range(1, 31)}


async def test_the_fleets_requests_are_listed_in_pages(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    async with admin.post("/reset", json={}) as r:
        assert r.status == 200
    answers = await many(served.url, 12, {"X-Chaos-Scenario": "slow"})
    ids = {r.headers["X-Chaos-Request-Id"] for r, _ in answers}
    assert {worker_of(i) for i in ids} == {0, 1}
    async with admin.get("/requests", params={"limit": "1000"}) as r:
        whole = await r.json()
    assert whole["next"] is None and {s["request_id"] for s in whole["requests"]} == ids
    newest_first = [s["request_id"] for s in whole["requests"]]
    for params in ({"limit": "5"}, {"max_bytes": "1"}):
        pages: list[list[str]] = []
        cursor = None
        while True:
            query = params if cursor is None else {**params, "cursor": cursor}
            async with admin.get("/requests", params=query) as r:
                assert r.status == 200
                page = await r.json()
            pages.append([s["request_id"] for s in page["requests"]])
            cursor = page["next"]
            if cursor is None:
                break
        assert [rid for p in pages for rid in p] == newest_first, params
        assert len(pages) == (3 if "limit" in params else 12), params
    async with admin.get("/requests", params={"contains": "x"}) as r:
        assert r.status == 400  # (no --log-content: the workers keep no prompts)
        assert (await r.json())["error"]["type"] == "content_not_kept"


async def test_requests_metrics_and_verdicts_answer_for_every_worker(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    async def total() -> float:
        async with admin.get("/metrics") as r:
            text = await r.text()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("chaosproxy_requests_total{")
        )

    async with admin.post("/reset", json={}) as r:
        assert r.status == 200
    before = await total()
    answers = await many(served.url, 24, {"X-Chaos-Scenario": "slow"})
    ids = {r.headers["X-Chaos-Request-Id"] for r, _ in answers}
    async with admin.get("/requests", params={"limit": "1000"}) as r:
        listed = (await r.json())["requests"]
    assert {s["request_id"] for s in listed} == ids
    assert all(s["state"] == "done" for s in listed)
    assert await total() == before + 24
    async with admin.get("/health") as r:
        assert (await r.json())["in_flight"] == 0
    # A verdict on a request of each worker: judged, logged, kept.
    for worker in (0, 1):
        request_id = next(i for i in ids if worker_of(i) == worker)
        async with admin.post(
            f"/requests/{request_id}/verdict", json={"text": None, "error": "gave up"}
        ) as r:
            assert r.status == 200, await r.text()
            verdict = await r.json()
        assert verdict["verdict"] in {"detected", "false_alarm"}
        assert verdict["requests"] == [request_id]
        async with admin.get(f"/requests/{request_id}") as r:
            assert (await r.json())["summary"]["verdict"]["verdict"] == verdict["verdict"]
        await until_logged(served, {request_id}, "verdict")
    # A run whose requests were served by both workers is judged whole.
    first, second = (next(i for i in sorted(ids) if worker_of(i) == w) for w in (0, 1))
    async with admin.post(
        f"/requests/{first}/verdict", json={"text": None, "error": "x", "requests": [second]}
    ) as r:
        assert r.status == 200, await r.text()
        assert set((await r.json())["requests"]) == {first, second}
    async with admin.get("/requests/r-0000w1-999999") as r:
        assert r.status == 404


def last_id(body: bytes) -> str:
    ids = re.findall(rb"^id: ?(\S+)", body, re.MULTILINE)
    assert ids, body[:300]
    return ids[-1].decode()


async def on_worker(
    url: str, worker: int, request: dict[str, Any], *, tries: int = 60
) -> tuple[str, int, bytes, str]:
    """Land ``request`` on a connection the kernel gave to ``worker``: a plain request
    first on each new connection says whose it is. (request id, status, body, the
    probe's id)."""
    for _ in range(tries):
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(url + CHAT, json=BODY) as probe:
                await probe.read()
                probe_id = probe.headers["X-Chaos-Request-Id"]
            if worker_of(probe_id) != worker:
                continue
            async with session.post(url + CHAT, **request) as response:
                body = await response.read()
                return response.headers["X-Chaos-Request-Id"], response.status, body, probe_id
    raise AssertionError(f"no connection landed on worker {worker} in {tries} tries")


async def test_a_reconnect_on_the_other_worker_is_answered_from_history(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    async with admin.post("/reset", json={}) as r:  # requests: [1] counts from here
        assert r.status == 200
    handed_before = await handed_over(admin)  # other tests of the module hand over too
    auth = {"Authorization": "Bearer alice"}
    first, body = await one(served.url, {"X-Chaos-Scenario": "resumable", **auth})
    first_id = first.headers["X-Chaos-Request-Id"]
    owner = worker_of(first_id)
    seen = last_id(body)
    assert seen.startswith(f"w{owner}_") and seen.endswith(".3")  # cut after the third
    other = 1 - owner
    headers = {"X-Chaos-Scenario": "resumable", "Last-Event-ID": seen, **auth}
    request_id, status, resumed, probe_id = await on_worker(
        served.url, other, {"json": BODY, "headers": headers}
    )
    assert worker_of(probe_id) == other  # the connection was the other worker's...
    assert worker_of(request_id) == owner  # ... and the worker that keeps it answered
    assert status == 200
    ids = re.findall(rb"^id: ?(\S+)", resumed, re.MULTILINE)
    assert ids[0].decode() == seen.rsplit(".", 1)[0] + ".4"  # from the next event on
    assert resumed.endswith(b"data: [DONE]\n\n")
    async with admin.get(f"/requests/{request_id}") as r:
        summary = (await r.json())["summary"]
    assert summary["resumes"] == first_id
    assert await handed_over(admin) == handed_before + 1


async def handed_over(admin: aiohttp.ClientSession) -> float:
    """The proxy's ``chaosproxy_connections_handed_over_total``, over the admin API."""
    async with admin.get("/metrics") as r:
        found = re.search(r"^chaosproxy_connections_handed_over_total (\S+)$", await r.text(), re.M)
    assert found is not None
    return float(found.group(1))


async def test_tenants_stay_isolated_across_workers(
    served: Served, admin: aiohttp.ClientSession
) -> None:
    async with admin.post("/reset", json={}) as r:
        assert r.status == 200
    alice = {"Authorization": "Bearer alice"}
    first, body = await one(served.url, {"X-Chaos-Scenario": "resumable", **alice})
    owner = worker_of(first.headers["X-Chaos-Request-Id"])
    seen = last_id(body)
    # Bob, with Alice's id, from a connection of the other worker: handed over, and
    # there, under Bob's credentials, the id is unknown (missing: 204).
    bob = {"X-Chaos-Scenario": "resumable", "Last-Event-ID": seen, "Authorization": "Bearer bob"}
    request_id, status, resumed, _ = await on_worker(
        served.url, 1 - owner, {"json": BODY, "headers": bob}
    )
    assert worker_of(request_id) == owner
    assert status == 204 and resumed == b""
    # A forged id naming a worker that keeps nothing of it: missing too.
    forged = {**bob, "Last-Event-ID": f"w{1 - owner}_forgedtokenforgedtoken.3"}
    _, status, resumed, _ = await on_worker(served.url, owner, {"json": BODY, "headers": forged})
    assert status == 204 and resumed == b""
    # The control: Alice herself gets the rest of her stream.
    _, status, resumed, _ = await on_worker(
        served.url,
        1 - owner,
        {"json": BODY, "headers": {**bob, "Authorization": "Bearer alice"}},
    )
    assert status == 200 and resumed.endswith(b"data: [DONE]\n\n")


def test_sigterm_stops_every_worker_and_ends_every_request(tmp_path: Path) -> None:
    # The log to stdout, a pipe: the supervisor relays the workers' whole lines.
    served = start(tmp_path, "--log", "-", log=False, stdout=subprocess.PIPE)
    assert served.process.stdout is not None
    output = bytearray()

    async def run() -> tuple[list[str], float]:
        reader = asyncio.get_running_loop().run_in_executor(
            None,
            lambda: output.extend(served.process.stdout.read()),  # type: ignore[union-attr]
        )
        sessions = [
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
            for _ in range(12)
        ]
        try:
            responses = await asyncio.gather(
                *(
                    s.post(served.url + CHAT, json=BODY, headers={"X-Chaos-Scenario": "slow"})
                    for s in sessions
                )
            )
            for response in responses:
                await response.content.readany()  # each stream has begun
            ids = [r.headers["X-Chaos-Request-Id"] for r in responses]
            # The clients stay; the proxy stops under them.
            took = await asyncio.to_thread(stop, served)
            await reader
        finally:
            for session in sessions:
                await session.close()
        return ids, took

    try:
        ids, took = asyncio.run(run())
    finally:
        if served.process.poll() is None:
            served.process.kill()
    assert served.process.returncode == 0
    assert took <= GRACE + 1.0 + 0.3, took  # (+ the test's own view of the exit)
    assert {worker_of(i) for i in ids} == {0, 1}
    for pid in served.pids:  # every worker is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    lines = [orjson.loads(line) for line in bytes(output).splitlines()]
    ends = Counter(line["request_id"] for line in lines if line["event"] == "response_end")
    for request_id in ids:
        assert ends[request_id] == 1
    outcomes = {
        line["outcome"]
        for line in lines
        if line["event"] == "response_end" and line["request_id"] in ids
    }
    assert outcomes == {"shutdown"}


def test_a_port_in_use_stops_start_up_in_one_line(tmp_path: Path) -> None:

    with busy_port() as port:
        env = settings_free_environment()
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [
                *(sys.executable, "-m", "chaosproxy", "serve", "--workers", "2"),
                *("--listen", f"127.0.0.1:{port}", "--admin", "off"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"chaosproxy: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]

"""Hostile peers against what the proxy keeps across requests (issue 21: tenancy of
resume history and splice sources, and bounded resume readers; issue 39: browser users
kept apart), through the live proxy.

Each test replays one case of the audits as a script, with clients that are different
users in front of an upstream that answers each user with text only that user should
ever see (``<user:n>``) and a cookie of its own. A user is told apart by the proxy in one
of three ways (:data:`WAYS`): an API key, a session cookie (``--tenant-cookie sid``),
or not at all: an anonymous user, whom only the upstream knows (by a header the proxy
does not key on), as a browser's ``EventSource`` without a session is:

* a forged ``Last-Event-ID`` built from the sequential request id another client was
  shown reads nothing of the victim's (header-chosen scenario, staging ``match:``);
* a leaked stream id (the victim's real first event id) read by another keyed or cookie
  user gives nothing of the victim's, nor its cookie, and the id is shown nowhere whole;
* two users of an upstream whose ids collide (``ids: upstream``) each resume their own,
  and anonymous users never resume into each other's (nor into their own: nothing tells
  them apart);
* ``splice`` takes neither the previous user's answer nor those of users streaming now,
  whether users are keyed, cookie users or anonymous;
* 200 clients that leave a resumable stream leave at most ``streams`` readers, upstream
  connections and histories behind, and the proxy serves others meanwhile;
* with ``--upstream-max-connections 50``, 50 clients that leave never starve others.

Every test here fails on the commit before tenancy (the leak or the starvation is what
it asserts against); each carries a control showing that what it looks for is there to
be found.
"""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from chaosproxy.control.start import RunningProxy
from chaosproxy.core.history import StreamHistory
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.scripted_upstream import serve_handler, until

pytestmark = pytest.mark.timeout(120)

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
#: A user's text in an answer: ``<alice:3>``.
TEXT = re.compile(r"<([\w-]+):[\w]+>")


# ---------------------------------------------------------------------- the upstream


#: How the proxy tells users apart: an API key, a session cookie (every proxy here has
#: ``--tenant-cookie sid``), or nothing (anonymous: the user is named to the upstream
#: only, in ``X-Test-User``).
WAYS = ["key", "cookie", "anonymous"]
#: The session cookie every proxy here keys tenants on.
SESSION = "sid"


def user_of(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if SESSION in request.cookies:
        return request.cookies[SESSION]
    return request.headers.get("x-api-key") or str(request.headers.get("X-Test-User", "anonymous"))


def chunk(text: str, *, role: bool = False) -> bytes:
    delta = {"role": "assistant"} if role else {"content": text}
    payload = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return orjson.dumps(payload)


@dataclass
class Users:
    """An OpenAI-chat upstream that answers each user (its API key) with its own text,
    ``<user:1>`` … ``<user:N>``, and ``Set-Cookie: session=<user>``. Request headers
    (forwarded by the proxy) shape the answer: ``X-Test-Events`` (20) deltas,
    ``X-Test-Ids: 1`` numbers the events ``id: 1``, ``id: 2``…, ``X-Test-Pad`` pads each
    text, ``X-Test-Then``: ``end`` (``[DONE]``), ``hold`` (silent, open) or ``trickle``
    (one more delta every 100 ms)."""

    url: str = ""
    #: Responses being sent now (upstream connections in use).
    open: int = 0
    #: The user of every request, in order.
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        user = user_of(request)
        self.seen.append(user)
        n = int(request.headers.get("X-Test-Events", "20"))
        ids = request.headers.get("X-Test-Ids") == "1"
        pad = "." * int(request.headers.get("X-Test-Pad", "0"))
        then = request.headers.get("X-Test-Then", "end")
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Set-Cookie": f"session={user}"}
        )
        self.open += 1
        try:
            await resp.prepare(request)
            events = [chunk("", role=True)] + [chunk(f"<{user}:{i}>{pad}") for i in range(1, n + 1)]
            for i, data in enumerate(events, 1):
                head = b"id: %d\n" % i if ids else b""
                await resp.write(head + b"data: " + data + b"\n\n")
            if then == "hold":
                await asyncio.Event().wait()
            late = 0
            while then == "trickle":
                await asyncio.sleep(0.1)
                late += 1
                await resp.write(b"data: " + chunk(f"<{user}:late{late}>{pad}") + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        finally:
            self.open -= 1
        return resp


@pytest.fixture
async def users() -> AsyncIterator[Users]:
    """The upstream; a test asks for it before ``make_proxy``, so that the proxy (and its
    background readers) stops first."""
    async with serve_handler(Users()) as upstream:
        yield upstream


# ---------------------------------------------------------------------- the clients


@dataclass
class Got:
    status: int
    request_id: str
    cookie: str
    #: (id, data) of every event received.
    events: list[tuple[str | None, str]]

    @property
    def owners(self) -> list[str]:
        """Whose text it holds, one entry per ``<user:n>``, in order."""
        return [m.group(1) for _, data in self.events for m in TEXT.finditer(data)]

    @property
    def last_id(self) -> str | None:
        ids = [i for i, _ in self.events if i is not None]
        return ids[-1] if ids else None


def parse(body: bytes) -> list[tuple[str | None, str]]:
    events = []
    for block in body.split(b"\n\n"):
        event_id, data = None, []
        for line in block.split(b"\n"):
            name, _, value = line.partition(b": ")
            if name == b"id":
                event_id = value.decode()
            elif name == b"data":
                data.append(value.decode())
        if data:
            events.append((event_id, "\n".join(data)))
    return events


def as_user(who: str | None, way: str = "key", **headers: str) -> dict[str, str]:
    """Request headers of the client of user ``who`` (None: no credentials at all, the
    upstream's "anonymous"), told apart by the proxy ``way`` (:data:`WAYS`)."""
    sent: dict[str, str] = {}
    if who is not None:
        sent = {
            "key": {"Authorization": f"Bearer {who}"},
            "cookie": {"Cookie": f"theme=dark; {SESSION}={who}"},
            "anonymous": {"X-Test-User": who},
        }[way]
    sent.update(headers)
    return sent


async def tenancy_proxy(make_proxy: ProxyFactory, **options: Any) -> RunningProxy:
    """A proxy whose tenants are keyed on credentials and the ``sid`` cookie."""
    return await make_proxy(tenant_cookie=SESSION, **options)


async def ask(
    proxy: RunningProxy, headers: dict[str, str], *, path: str = CHAT, limit: float = 10
) -> Got:
    """One whole answer (a cut or clean end alike: what arrived)."""
    body = b""
    async with (
        asyncio.timeout(limit),
        aiohttp.ClientSession() as session,
        session.post(proxy.url + path, json=BODY, headers=headers) as resp,
    ):
        try:
            async for data in resp.content.iter_any():
                body += data
        except aiohttp.ClientPayloadError:  # cut uncleanly: what arrived is kept
            pass
        return Got(
            resp.status,
            resp.headers["X-Chaos-Request-Id"],
            resp.headers.get("Set-Cookie", ""),
            parse(body),
        )


async def leave(proxy: RunningProxy, headers: dict[str, str], *, events: int = 1) -> Got:
    """Ask, read ``events`` events, and go (the connection closed)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        asyncio.timeout(10),
        aiohttp.ClientSession(connector=connector) as session,
        session.post(proxy.url + CHAT, json=BODY, headers=headers) as resp,
    ):
        assert resp.status == 200
        body = b"".join([await resp.content.readuntil(b"\n\n") for _ in range(events)])
        resp.close()
        return Got(
            resp.status,
            resp.headers["X-Chaos-Request-Id"],
            resp.headers.get("Set-Cookie", ""),
            parse(body),
        )


def forged_from(own_request_id: str, back: int = 1) -> str:
    """The request id shown ``back`` requests before ``own_request_id`` (sequential)."""
    prefix, _, n = own_request_id.rpartition("-")
    return f"{prefix}-{int(n) - back}"


# ---------------------------------------------------------------------- the cases

RESUMABLE = "resume: {policy: %s}\nfaults: []\n"
STAGING = 'match: {path: "/v1/chat/*"}\nresume: {policy: %s}\nfaults: []\n'


@pytest.mark.parametrize("chosen", ["header", "match"])
@pytest.mark.parametrize("policy", ["restart", "resume"])
@pytest.mark.parametrize("way", WAYS)
async def test_a_forged_last_event_id_reads_nothing_of_another_answer(
    users: Users,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    chosen: str,
    policy: str,
    way: str,
) -> None:
    """Request ids are sequential and every response shows one: the audit's attacker
    asked once, took its own id minus one, and sent ``Last-Event-ID: <that>.1``: 20 of
    20 of the victim's events and its cookie came back, under a header-chosen scenario
    and under a staging ``match:`` the victim never asked for. Now: ``missing`` (204),
    nothing of the victim's, no link to its stream in the log; for keyed users, cookie
    users, and anonymous ones (their shared tenant for history: it is the token that
    cannot be guessed)."""
    text = (RESUMABLE if chosen == "header" else STAGING) % policy
    proxy = await tenancy_proxy(make_proxy, upstream=users.url, scenarios={"kept": text})
    pick = {"X-Chaos-Scenario": "kept"} if chosen == "header" else {}
    theirs = await ask(proxy, as_user("victim", way, **pick))
    assert theirs.status == 200 and len(theirs.owners) == 20  # the victim's whole answer
    assert set(theirs.owners) == {"victim"}
    mine = await ask(proxy, as_user("mallory", way, **pick))
    victim_id = forged_from(mine.request_id)
    assert victim_id == theirs.request_id  # the audit's arithmetic
    # The control: the attacker's own stream resumes (the ids it was shown work).
    first_id = mine.events[0][0]
    assert first_id is not None
    own = await ask(proxy, as_user("mallory", way, **pick, **{"Last-Event-ID": first_id}))
    assert own.status == 200 and own.owners == mine.owners
    forged = await ask(
        proxy, as_user("mallory", way, **pick, **{"Last-Event-ID": f"{victim_id}.1"})
    )
    assert (forged.status, forged.events, forged.cookie) == (204, [], "")
    request = log_capture.for_request(forged.request_id)[0]
    assert request["resume_reason"] == "unknown event id" and "resumes" not in request


@pytest.mark.parametrize(
    ("way", "cookie"), [("key", SESSION), ("cookie", SESSION), ("cookie", "*")]
)
async def test_a_leaked_stream_id_gives_another_user_nothing(
    users: Users,
    make_proxy: ProxyFactory,
    log_capture: LogCapture,
    tmp_path: Path,
    way: str,
    cookie: str,
) -> None:
    """The audit: a leaked first event id gave another cookie user (one tenant with every
    anonymous client, then) 20 of the victim's 20 events and its ``Set-Cookie``. Now a
    cookie user is a tenant (``--tenant-cookie sid``, or ``*``: the whole ``Cookie``), as
    a keyed user is: the victim's real id, presented by another user, is ``missing``
    (204): nothing of the victim's, no cookie, no link in the log. The id is shown
    nowhere whole: neither in the log, nor in the traces, nor in the admin's answers.
    The control: the victim itself resumes with it."""
    proxy = await make_proxy(
        upstream=users.url,
        scenarios={"kept": RESUMABLE % "resume"},
        tenant_cookie=cookie,
        admin=("127.0.0.1", 0),
        trace_dir=str(tmp_path),
    )
    pick = {"X-Chaos-Scenario": "kept"}
    victim = await ask(proxy, as_user("victim", way, **pick))
    leaked = victim.events[0][0]
    assert leaked is not None and victim.owners == ["victim"] * 20
    token = leaked.rpartition(".")[0]
    stolen = await ask(proxy, as_user("mallory", way, **pick, **{"Last-Event-ID": leaked}))
    assert (stolen.status, stolen.events, stolen.cookie) == (204, [], "")
    request = log_capture.for_request(stolen.request_id)[0]
    assert request["resume_reason"] == "unknown event id" and "resumes" not in request
    assert request["last_event_id"] == f"{token[:6]}\u2026.1"
    # The control: the victim's own reconnect (its cookies as they were) is its answer.
    back = await ask(proxy, as_user("victim", way, **pick, **{"Last-Event-ID": leaked}))
    assert back.status == 200 and back.owners == ["victim"] * 20
    assert back.cookie == "session=victim"
    await log_capture.wait_end(back.request_id)
    assert log_capture.for_request(back.request_id)[0]["resumes"] == victim.request_id
    # Shown nowhere whole: every line logged, every trace, every admin answer about them.
    for got in (victim, stolen):
        await log_capture.wait_end(got.request_id)  # (its trace is whole then)
    assert token not in orjson.dumps(log_capture.lines).decode()
    traces = await asyncio.to_thread(lambda: {p.name: p.read_text() for p in tmp_path.iterdir()})
    assert {f"{g.request_id}.jsonl" for g in (victim, stolen, back)} <= set(traces)
    assert all(token not in text for text in traces.values())
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as admin:
        for path in ["/requests", *(f"/requests/{g.request_id}" for g in (stolen, back))]:
            async with admin.get(proxy.admin_url + path) as resp:
                assert resp.status == 200
                assert token not in await resp.text()


async def test_the_whole_cookie_is_the_tenant_with_a_star(
    users: Users, make_proxy: ProxyFactory, log_capture: LogCapture
) -> None:
    """``--tenant-cookie '*'``: every cookie is part of the key, so the victim's own
    reconnect with one cookie changed (a theme) is another tenant's, and ``missing``;
    with ``--tenant-cookie sid`` only the session counts, and it resumes."""
    for cookie, resumes in (("*", False), (SESSION, True)):
        proxy = await make_proxy(
            upstream=users.url, scenarios={"kept": RESUMABLE % "resume"}, tenant_cookie=cookie
        )
        pick = {"X-Chaos-Scenario": "kept"}
        first = await ask(proxy, {"Cookie": f"theme=dark; {SESSION}=victim", **pick})
        assert first.owners == ["victim"] * 20
        seen = first.events[4][0]
        assert seen is not None
        headers = {"Cookie": f"{SESSION}=victim; theme=light", "Last-Event-ID": seen, **pick}
        again = await ask(proxy, headers)
        if resumes:
            assert again.status == 200 and again.owners == ["victim"] * 16
        else:
            assert (again.status, again.events) == (204, [])
            assert log_capture.for_request(again.request_id)[0]["resume_reason"] == (
                "unknown event id"
            )


@pytest.mark.parametrize("way", WAYS)
async def test_upstream_ids_that_collide_never_hand_one_users_events_to_another(
    users: Users, make_proxy: ProxyFactory, log_capture: LogCapture, way: str
) -> None:
    """``ids: upstream`` with an upstream that numbers every answer 1, 2, …: the audit's
    user, cut after 5 events, reconnected with its own last id and got 15 of another
    user's events and that user's cookie, none of its own (the lookup was "newest
    stream with that id", across all clients). Now each keyed or cookie user resumes its
    own; an anonymous user, whom nothing tells from another, resumes nobody's (``missing``,
    saying why), never another's."""
    text = "resume: {ids: upstream}\nrequests: [1]\nfaults:\n  - cut: {after: 5}\n"
    proxy = await tenancy_proxy(make_proxy, upstream=users.url, scenarios={"s": text}, default="s")
    numbered = {"X-Test-Ids": "1"}
    alice = await ask(proxy, as_user("alice", way, **numbered))  # request 1: cut after 5
    assert [i for i, _ in alice.events] == ["1", "2", "3", "4", "5"]
    bob = await ask(proxy, as_user("bob", way, **numbered))  # request 2: whole, ids 1..21
    assert bob.last_id == "21" and set(bob.owners) == {"bob"}
    again = await ask(proxy, as_user("alice", way, **numbered, **{"Last-Event-ID": "5"}))
    request = log_capture.for_request(again.request_id)[0]
    if way == "anonymous":
        assert (again.status, again.events, again.cookie) == (204, [], "")
        assert request["resume_reason"] == "anonymous upstream id" and "resumes" not in request
        # The control: the same ids under a key find the keyed user's own stream.
        keyed = await ask(proxy, as_user("carol", "key", **numbered))
        assert keyed.last_id == "21"
        his = await ask(proxy, as_user("carol", "key", **numbered, **{"Last-Event-ID": "5"}))
        assert his.cookie == "session=carol" and his.owners == ["carol"] * 16
        return
    assert again.status == 200
    assert again.cookie == "session=alice"
    assert again.owners == ["alice"] * 16  # <alice:5> .. <alice:20>
    assert [i for i, _ in again.events] == [*map(str, range(6, 22)), None]  # [DONE]: no id
    assert request["resumes"] == alice.request_id
    # The control: Bob's reconnect from the same id is found, and is his.
    his = await ask(proxy, as_user("bob", way, **numbered, **{"Last-Event-ID": "5"}))
    assert his.cookie == "session=bob" and his.owners == ["bob"] * 16


LEAKY_PREVIOUS = "faults:\n  - splice: {from: previous, after: 1, across_tenants: true}\n"


@pytest.mark.parametrize("way", WAYS)
async def test_splice_previous_never_takes_the_previous_users_answer(
    users: Users, make_proxy: ProxyFactory, log_capture: LogCapture, way: str
) -> None:
    """The audit: 40 parallel ``splice-previous-delta`` requests right after another
    user's answer recovered 18 of its 20 deltas; anonymous and cookie users were one
    tenant, so mixed. Now none, however users are told apart: a keyed or cookie user's
    own previous answer is its only source (its text is the control); an anonymous
    request takes none (the control: a scenario that says ``across_tenants`` finds the
    victim's answer there to take)."""
    proxy = await tenancy_proxy(
        make_proxy,
        upstream=users.url,
        scenarios={"framed": "faults: []", "leaky": LEAKY_PREVIOUS},
        library=True,
        seed=1,
    )
    victim = await ask(proxy, as_user("victim", way, **{"X-Chaos-Scenario": "framed"}))
    assert victim.owners == ["victim"] * 20
    await log_capture.wait_end(victim.request_id)
    splice = {"X-Chaos-Scenario": "splice-previous-delta"}
    got = await asyncio.gather(*(ask(proxy, as_user("mallory", way, **splice)) for _ in range(40)))
    assert "victim" not in [o for g in got for o in g.owners]
    for g in got:
        await log_capture.wait_end(g.request_id)
    sources = {f.get("splice_from") for g in got for f in log_capture.frames(g.request_id)}
    assert victim.request_id not in sources
    if way == "anonymous":
        assert sources == {None}
        assert {log_capture.end(g.request_id)["faults_skipped"][0]["reason"] for g in got} == {
            "from: previous: an anonymous request (no credentials, tenant header or tenant "
            "cookie) takes from no other stream: nothing tells its user apart"
        }
        again = await ask(proxy, as_user("victim", way, **{"X-Chaos-Scenario": "framed"}))
        await log_capture.wait_end(again.request_id)
        taken = await ask(proxy, as_user("mallory", way, **{"X-Chaos-Scenario": "leaky"}))
        assert taken.owners.count("victim") == 1 and taken.owners.count("mallory") == 20
        return
    # The control: once the attacker's own answer has finished, its text is spliced.
    own = await ask(proxy, as_user("mallory", way, **{"X-Chaos-Scenario": "framed"}))
    await log_capture.wait_end(own.request_id)
    spliced = await ask(proxy, as_user("mallory", way, **splice))
    assert spliced.owners.count("mallory") == 21 and "victim" not in spliced.owners


LEAKY_CONCURRENT = "faults:\n  - splice: {from: concurrent, after: 1, across_tenants: true}\n"


@pytest.mark.parametrize("way", WAYS)
async def test_splice_concurrent_never_takes_users_streaming_now(
    users: Users, make_proxy: ProxyFactory, log_capture: LogCapture, way: str
) -> None:
    """The audit: ``splice-concurrent-delta`` gave 4 deltas from the 4 users streaming at
    that moment. Now none of theirs, however users are told apart; a keyed or cookie
    user's own running stream is still a source; an anonymous request has none (the
    control: ``across_tenants`` finds theirs there to take)."""
    proxy = await tenancy_proxy(
        make_proxy,
        upstream=users.url,
        scenarios={"framed": "faults: []", "leaky": LEAKY_CONCURRENT},
        library=True,
        seed=1,
    )
    running: list[aiohttp.ClientResponse] = []
    async with aiohttp.ClientSession() as session:
        for i in range(4):
            headers = as_user(f"v{i}", way, **{"X-Chaos-Scenario": "framed", "X-Test-Then": "hold"})
            resp = await session.post(proxy.url + CHAT, json=BODY, headers=headers)
            seen = b""
            async with asyncio.timeout(5):
                while seen.count(b"\n\n") < 21:  # its whole text is out, so recorded
                    seen += await resp.content.readany()
            running.append(resp)
        splice = {"X-Chaos-Scenario": "splice-concurrent-delta"}
        got = [await ask(proxy, as_user("mallory", way, **splice)) for _ in range(4)]
        assert [g.owners for g in got] == [["mallory"] * 20] * 4  # nothing of theirs
        why = (
            "an anonymous request (no credentials, tenant header or tenant cookie) takes "
            "from no other stream: nothing tells its user apart"
            if way == "anonymous"
            else "no other framed stream of this tenant was running"
        )
        for g in got:
            end = await log_capture.wait_end(g.request_id)
            assert end["faults_applied"] == {}
            assert end["faults_skipped"][0]["reason"] == f"from: concurrent: {why}"
        if way == "anonymous":
            # The control: their streams are there to take, for a scenario that says so.
            own = await ask(proxy, as_user("v0", way, **splice))
            assert own.owners == ["v0"] * 20  # not even an anonymous user's "own"
            taken = await ask(proxy, as_user("mallory", way, **{"X-Chaos-Scenario": "leaky"}))
            stolen = [o for o in taken.owners if o != "mallory"]
            assert len(stolen) == 1 and stolen[0] in {"v0", "v1", "v2", "v3"}
        else:
            # The control: the first user, streaming still, is spliced into its own answer.
            own = await ask(proxy, as_user("v0", way, **splice))
            assert own.owners.count("v0") == 21 and set(own.owners) == {"v0"}
        for resp in running:
            resp.close()


@pytest.mark.slow
async def test_two_hundred_clients_that_leave_leave_bounded_readers_and_history(
    users: Users, make_proxy: ProxyFactory
) -> None:
    """The audit: 200 clients that left a resumable stream (``streams: 5, max_bytes:
    1MiB``) kept 200 upstream connections read on, and their histories (RSS 57 → 256
    MB against ~5 MiB). Now the store's bound holds the readers too: at most 5 streams
    are read on, at most 5 histories live in memory (counted over every object alive),
    and everyone else is served meanwhile."""
    text = "resume: {streams: 5, max_bytes: 1MiB}\nfaults: []\n"
    proxy = await make_proxy(upstream=users.url, scenarios={"kept": text})
    manager = proxy.state.resume
    shape = {"X-Chaos-Scenario": "kept", "X-Test-Pad": "400", "X-Test-Then": "trickle"}
    gate = asyncio.Semaphore(20)

    async def one(i: int) -> tuple[str, str]:
        async with gate:
            user = f"user-{i}"
            return (await leave(proxy, as_user(user, **shape))).request_id, user

    left = dict(await asyncio.gather(*(one(i) for i in range(200))))
    assert len(left) == 200
    served = await ask(proxy, as_user("someone-else"), limit=5)  # a passthrough request
    assert served.owners == ["someone-else"] * 20
    await until(lambda: manager.readers <= 5 and users.open <= 5, limit=10)
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, StreamHistory)]
    alive = [s for s in alive if s.request_id in left]
    assert len(alive) <= 5
    assert sum(s.bytes for s in alive) <= 5 * 2**20
    # The control: the 5 kept are read on (more than their clients saw), and resumable.
    kept = list(manager.store.streams("kept"))
    assert len(kept) == 5 and manager.readers == 5 and users.open == 5
    stream = kept[-1]
    await until(lambda: stream.total > 25)
    user = left[stream.request_id]
    resumed = await leave(
        proxy, as_user(user, **shape, **{"Last-Event-ID": f"{stream.token}.1"}), events=24
    )
    assert resumed.owners == [user] * 24
    assert [i for i, _ in resumed.events] == [f"{stream.token}.{n}" for n in range(2, 26)]


async def test_readers_of_clients_that_left_never_starve_the_upstreams_connections(
    users: Users, make_proxy: ProxyFactory
) -> None:
    """The audit: with ``--upstream-max-connections 50``, 50 clients that left resumable
    streams held all 50 connections, and every other request waited for over 40 s.
    Now background readers take at most half (25): the 26th client that leaves is not
    read on (its stream ends ``abandoned``) and other requests are served at once."""
    proxy = await make_proxy(
        upstream=users.url,
        scenarios={"kept": "resume: {}\nfaults: []\n"},
        upstream_max_connections=50,
    )
    shape = {"X-Chaos-Scenario": "kept", "X-Test-Then": "hold"}
    await asyncio.gather(*(leave(proxy, as_user(f"user-{i}", **shape)) for i in range(50)))
    served = await ask(proxy, as_user("someone-else"), limit=5)
    assert served.status == 200 and served.owners == ["someone-else"] * 20
    manager = proxy.state.resume
    await until(lambda: users.open <= 25)
    states = sorted(s.state for s in manager.store.streams("kept"))
    assert states == ["abandoned"] * 25 + ["live"] * 25
    assert manager.readers == 25
    # Many more at once still get their answers: the readers hold half at most.
    answers = await asyncio.gather(
        *(ask(proxy, as_user(f"later-{i}"), limit=10) for i in range(60))
    )
    assert all(a.owners == [f"later-{i}"] * 20 for i, a in enumerate(answers))

"""The upstream's addresses (chaosproxy/upstream/resolver.py): an IP literal never looked
up, one lookup shared by a burst of connects, its answer kept briefly (``_DNS_TTL``)
and without repeats, a failed family dropped from it, a failed lookup told to every
waiter and asked again by the next connect. The lookups here are the loop's
``getaddrinfo`` scripted; connecting is test_eyeballs.py's."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from chaosproxy.upstream import resolver as resolver_mod
from chaosproxy.upstream.resolver import Resolver

V4, V6 = int(socket.AF_INET), int(socket.AF_INET6)


def info(family: socket.AddressFamily, address: str) -> tuple[object, ...]:
    sockaddr = (address, 80, 0, 0) if family == socket.AF_INET6 else (address, 80)
    return (family, socket.SOCK_STREAM, 6, "", sockaddr)


class Lookups:
    """The loop's getaddrinfo, answering from a script and counting calls."""

    def __init__(self, *answers: list[tuple[object, ...]] | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(self, *args: Any, **kw: Any) -> list[tuple[object, ...]]:
        self.calls.append((*args, kw))
        await asyncio.sleep(0)  # (the burst arrives while it is asked)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize(("host", "family"), [("127.0.0.1", V4), ("::1", V6), ("10.1.2.3", V4)])
async def test_an_ip_literal_is_never_looked_up(
    host: str, family: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    lookups = Lookups()
    monkeypatch.setattr(loop, "getaddrinfo", lookups)
    assert await Resolver(host, 80).resolve(loop) == [(family, host)]
    assert lookups.calls == []


async def test_one_lookup_for_a_burst_kept_briefly_a_failed_family_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolver_mod._DNS_TTL <= 10
    calls = 0

    async def fake_getaddrinfo(*_a: object, **_k: object) -> list[tuple[object, ...]]:
        nonlocal calls
        calls += 1
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 80, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)),
        ]

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "getaddrinfo", fake_getaddrinfo)
    res = Resolver("upstream.test", 80)
    both = await asyncio.gather(*(res.resolve(loop) for _ in range(5)))
    assert calls == 1  # one lookup for the burst
    assert both[0] == [(V6, "::1"), (V4, "127.0.0.1")]
    res.forget(V6)
    assert await res.resolve(loop) == [(V4, "127.0.0.1")]
    assert calls == 1
    res.forget(V4)
    assert await res.resolve(loop) == [(V6, "::1"), (V4, "127.0.0.1")]
    assert calls == 2


async def test_the_answer_has_no_repeats_and_is_kept_for_its_time_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    twice = [info(socket.AF_INET, "10.0.0.1"), info(socket.AF_INET, "10.0.0.1")]
    lookups = Lookups(twice, [info(socket.AF_INET, "10.0.0.2")])
    monkeypatch.setattr(loop, "getaddrinfo", lookups)
    now = loop.time()
    monkeypatch.setattr(loop, "time", lambda: now)
    res = Resolver("upstream.test", 443)
    assert await res.resolve(loop) == [(V4, "10.0.0.1")]
    assert lookups.calls[0][:2] == ("upstream.test", 443)
    now += resolver_mod._DNS_TTL - 0.001
    assert await res.resolve(loop) == [(V4, "10.0.0.1")]  # still kept
    now += 0.001
    assert await res.resolve(loop) == [(V4, "10.0.0.2")]  # its time is up: asked again
    assert len(lookups.calls) == 2


async def test_a_failed_lookup_fails_every_waiter_and_the_next_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    refused = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    lookups = Lookups(refused, [info(socket.AF_INET, "10.0.0.9")])
    monkeypatch.setattr(loop, "getaddrinfo", lookups)
    res = Resolver("nowhere.test", 80)
    failed = await asyncio.gather(*(res.resolve(loop) for _ in range(3)), return_exceptions=True)
    assert failed == [refused] * 3
    assert await res.resolve(loop) == [(V4, "10.0.0.9")]
    assert len(lookups.calls) == 2
    res.forget(V6)  # (no such family in it: kept)
    assert await res.resolve(loop) == [(V4, "10.0.0.9")]


async def test_a_waiter_cancelled_does_not_cancel_the_shared_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    lookups = Lookups([info(socket.AF_INET, "10.0.0.5")])
    monkeypatch.setattr(loop, "getaddrinfo", lookups)
    res = Resolver("upstream.test", 80)
    first = asyncio.ensure_future(res.resolve(loop))
    second = asyncio.ensure_future(res.resolve(loop))
    await asyncio.sleep(0)
    first.cancel()
    assert await second == [(V4, "10.0.0.5")]
    assert first.cancelled()
    assert len(lookups.calls) == 1

"""Integrity through the live proxy: library scenarios in front of the mock upstream,
read by a raw socket client; the ``response_end`` line must carry the integrity the
scenario causes, and its ``sent`` text hash must be that of the text the client itself
assembles from the bytes it received."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from chaosproxy.control.start import RunningProxy
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.raw_http import dechunk

CHAT_BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
).encode()


async def fetch(proxy: RunningProxy, scenario: str | None) -> tuple[str, bytes]:
    """POST a chat stream through the proxy; the request id and the decoded body bytes
    received before the connection ended (however it ended)."""
    url = urlsplit(proxy.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(CHAT_BODY)}\r\nX-Mock-Tokens: 8\r\nConnection: close\r\n"
        + (f"X-Chaos-Scenario: {scenario}\r\n" if scenario else "")
        + "\r\n"
    )
    writer.write(head.encode() + CHAT_BODY)
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except ConnectionError:
        pass  # a reset: what arrived before it is what the client got
    finally:
        writer.close()
    response_head, _, body = data.partition(b"\r\n\r\n")
    request_id = ""
    for line in response_head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "x-chaos-request-id":
            request_id = value.strip()
    decoded, _ = dechunk(body)
    return request_id, decoded


def client_text(body: bytes) -> str:
    """What a naive client prints: every chunk's ``delta.content``, in order, for every
    complete event (``data: [DONE]`` and unfinished events skipped)."""
    text = ""
    for block in body.split(b"\n\n")[:-1]:
        for line in block.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
    return text


def sha(text: str) -> str:
    return hashlib.sha256(text.rstrip().encode()).hexdigest()


LIBRARY_CASES = {
    # scenario: (integrity, the sent text equals the upstream's)
    None: None,  # passthrough: not framed, no integrity
    "one-byte-per-read": ("intact", True),
    "all-events-in-one-read": ("intact", True),
    "duplicate-third-delta": ("altered", False),
    "drop-third-delta": ("altered", False),
    "reverse-two-deltas": ("altered", False),
    "terminal-event-twice": ("altered", True),
    "cut-before-terminal-close": ("incomplete", True),
    "cut-before-terminal-abort": ("broken", True),
    "reset-mid-stream": ("broken", True),  # (the proxy read the upstream up to the cut)
}


@pytest.mark.parametrize("scenario", list(LIBRARY_CASES), ids=str)
async def test_response_end_carries_the_integrity_of_a_library_scenario(
    make_proxy: ProxyFactory, log_capture: LogCapture, scenario: str | None
) -> None:
    proxy = await make_proxy(library=True)
    _, reference = await fetch(proxy, None)
    upstream_text = client_text(reference)
    assert len(upstream_text) > 10
    request_id, body = await fetch(proxy, scenario)
    end: dict[str, Any] = await log_capture.wait_end(request_id)
    expected = LIBRARY_CASES[scenario]
    if expected is None:
        assert "integrity" not in end and "text_sha256" not in end
        return
    integrity, same_text = expected
    assert end["integrity"] == integrity, end
    hashes = end["text_sha256"]
    # The mock is deterministic: the upstream text is the passthrough run's (up to where
    # the proxy stopped reading it: a cut ends the upstream request too).
    if scenario == "reset-mid-stream":
        prefixes = {sha(upstream_text[:n]) for n in range(len(upstream_text))}
        assert hashes["upstream"] in prefixes
    else:
        assert hashes["upstream"] == sha(upstream_text)
    assert hashes["sent"] == sha(client_text(body))
    assert (hashes["sent"] == hashes["upstream"]) is same_text

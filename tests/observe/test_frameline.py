"""The frame line of a plain write (chaosproxy/observe/frameline.py and its C twin,
frameline.c): the same bytes as orjson's text of the line's dict, from both twins, for
random fields; the same None from both where either leaves the line to orjson."""

from __future__ import annotations

import math
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosproxy._build import build
from chaosproxy.control.start import start_proxy
from chaosproxy.core.summary import round_ms
from chaosproxy.observe import frameline
from chaosproxy.observe.logs import COPY_ENV, FrameLog, json_prefix
from chaosproxy.server.config import Config
from tests.support.native import build_frameline
from tests.support.scripted_upstream import raw_upstream, until

CONTEXT = {"request_id": "r-1", "scenario": None}
TS = b"2026-12-01T15:36:00.123Z"


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return build_frameline(tmp_path_factory.mktemp("frameline"))


def orjson_line(
    context: dict[str, Any], seq: Any, offset: Any, size: Any, t_ms: Any, ts: bytes
) -> bytes:
    line = {**context, "seq": seq, "offset": offset, "size": size, "t_ms": t_ms}
    line.update({"event": "frame", "ts": ts.decode("ascii")})
    return orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)


def test_the_line_of_a_write_is_orjsons(native: ModuleType) -> None:
    prefix = json_prefix(CONTEXT)
    want = (
        b'{"request_id":"r-1","scenario":null,"seq":3,"offset":120,"size":40,'
        b'"t_ms":12.05,"event":"frame","ts":"2026-12-01T15:36:00.123Z"}\n'
    )
    assert orjson_line(CONTEXT, 3, 120, 40, 12.05, TS) == want
    assert native.frame_line(prefix, 3, 120, 40, 12.05, TS) == want
    assert frameline.frame_line(prefix, 3, 120, 40, 12.05, TS) == want


@pytest.mark.parametrize(
    ("t_ms", "text"),
    [
        (0.0, b"0.0"),
        (0.001, b"0.001"),
        (0.01, b"0.01"),
        (0.1, b"0.1"),
        (1.0, b"1.0"),
        (7.25, b"7.25"),
        (999.999, b"999.999"),
        (1000.0, b"1000.0"),
        (123456789.012, b"123456789.012"),
        (999999999999.999, b"999999999999.999"),
    ],
)
def test_the_time_is_written_as_orjson_writes_it(
    native: ModuleType, t_ms: float, text: bytes
) -> None:
    prefix = json_prefix(CONTEXT)
    want = orjson_line(CONTEXT, 0, 0, 1, t_ms, TS)
    assert b'"t_ms":' + text + b"," in want
    assert native.frame_line(prefix, 0, 0, 1, t_ms, TS) == want
    assert frameline.frame_line(prefix, 0, 0, 1, t_ms, TS) == want


@pytest.mark.parametrize(
    "args",
    [
        (0, 0, 1, 1.0001),  # not whole thousandths
        (0, 0, 1, 0.00001),  # orjson: 0.00001, Python: 1e-05; left to orjson
        (0, 0, 1, -0.0),
        (0, 0, 1, -1.0),
        (0, 0, 1, math.nan),
        (0, 0, 1, math.inf),
        (0, 0, 1, 1e12),  # past the bound
        (0, 0, 1, 3),  # an int for the float
        (0, 0, 1, "1.0"),
        (0, 0, 1, None),
        (0, 0, "1", 1.0),
        (True, 0, 1, 1.0),  # a bool for an int: orjson writes true
        (2**63, 0, 1, 1.0),  # past 64 bits
        (0, -(2**63) - 1, 1, 1.0),
    ],
)
def test_what_it_does_not_render_is_none_from_both(
    native: ModuleType, args: tuple[Any, Any, Any, Any]
) -> None:
    prefix = json_prefix(CONTEXT)
    assert native.frame_line(prefix, *args, TS) is None
    seq, offset, size, t_ms = args
    assert frameline.frame_line(prefix, seq, offset, size, t_ms, TS) is None


def test_a_long_stamp_or_other_types_are_none(native: ModuleType) -> None:
    prefix = json_prefix(CONTEXT)
    for twin in (native, frameline):
        assert twin.frame_line(prefix, 0, 0, 1, 1.0, b"x" * 49) is None
        assert twin.frame_line(bytearray(prefix), 0, 0, 1, 1.0, TS) is None
        assert twin.frame_line(prefix, 0, 0, 1, 1.0, TS.decode()) is None
        assert twin.frame_line(prefix, 0, 0, 1, 1.0, b"x" * 48) is not None
    with pytest.raises(TypeError, match="takes 6 arguments"):
        native.frame_line(prefix, 0, 0, 1, 1.0)


#: Text of any kind, control characters, quotes, backslashes and astral characters among
#: them: the request's bound fields, escaped by orjson once, into the prefix.
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TIMES = st.one_of(
    # what round_ms makes of any time: the usual t_ms
    st.floats(min_value=0.0, max_value=1e13, allow_nan=False).map(round_ms),
    st.integers(min_value=0, max_value=10**15 + 10).map(lambda k: k / 1000.0),
    st.floats(allow_nan=True, allow_infinity=True),
)


@settings(max_examples=3000, deadline=None)
@given(
    request_id=TEXT,
    scenario=st.one_of(st.none(), TEXT),
    seq=st.one_of(INT64, st.integers(), st.booleans()),
    offset=INT64,
    size=st.integers(min_value=0, max_value=2**40),
    t_ms=TIMES,
    ts=st.binary(max_size=50).map(lambda b: b.hex()[:50].encode()),
)
def test_both_twins_write_orjsons_bytes_or_none_together(
    native: ModuleType,
    request_id: str,
    scenario: str | None,
    seq: int,
    offset: int,
    size: int,
    t_ms: float,
    ts: bytes,
) -> None:
    context = {"request_id": request_id, "scenario": scenario}
    prefix = json_prefix(context)
    made = native.frame_line(prefix, seq, offset, size, t_ms, ts)
    assert frameline.frame_line(prefix, seq, offset, size, t_ms, ts) == made
    if made is not None:
        assert made == orjson_line(context, seq, offset, size, t_ms, ts)
        assert orjson.loads(made)["t_ms"] == t_ms


def test_every_time_round_ms_makes_is_rendered(native: ModuleType) -> None:
    """The fast path is the usual path: no t_ms of a write within 10**12 ms falls back."""
    prefix = json_prefix(CONTEXT)
    for i in range(20000):
        t_ms = round_ms(i * 0.0371 + (i % 7) * 1e-7)
        assert native.frame_line(prefix, i, i, 1, t_ms, TS) is not None


def test_the_build_runs_the_twin_it_should() -> None:
    """Where the package runs compiled, the C routine is what ``import`` finds; in a
    pure run (a pure build, ``CHAOSPROXY_PURE=1``), the Python twin."""
    compiled = build() == "compiled"
    assert ("native" if compiled else "python") == frameline.KIND
    origin = frameline.__file__ or ""
    assert origin.endswith(tuple(EXTENSION_SUFFIXES)) == compiled
    assert origin.endswith(".py") != compiled


async def test_a_passthrough_response_is_logged_line_by_line_by_the_routine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through real sockets, as ``serve`` runs (a frame log to a file, the admin store
    and the metrics, no other observer): every write of a passthrough response is
    logged by the routine, the store keeps the very lines the file has, and the lines
    account for the body exactly (seq, offset, size), as orjson writes them."""
    monkeypatch.delenv(COPY_ENV, raising=False)  # (the test run's copy: a dict observer)
    body = bytes(range(256)) * 1200  # 300 KiB: more than one read (how many, the sockets decide)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    path = tmp_path / "frames.jsonl"
    async with raw_upstream(answer) as upstream:
        config = Config(upstream=(upstream,), listen=("127.0.0.1", 0), admin=None)
        log = FrameLog.open(str(path))
        proxy = await start_proxy(config, log=log)
        try:
            assert not log._frame_calls and not log._frame_dict and log._frame_natives
            async with aiohttp.ClientSession() as client, client.get(proxy.url + "/x") as resp:
                assert await resp.read() == body
            await until(lambda: any(r.done for r in proxy.requests.records()))
        finally:
            await proxy.close()
    written = path.read_bytes().splitlines(keepends=True)
    frames = [line for line in written if b'"event":"frame"' in line]
    (record,) = proxy.requests.records()
    assert record.frames == frames
    assert len(frames) >= 2 and (record.sent_frames, record.sent_bytes) == (len(frames), len(body))
    parsed = [orjson.loads(line) for line in frames]
    assert [f["seq"] for f in parsed] == list(range(len(frames)))
    offsets = [f["offset"] for f in parsed]
    sizes = [f["size"] for f in parsed]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))] and sum(sizes) == len(body)
    for f, line in zip(parsed, frames, strict=True):
        assert orjson.dumps(f, option=orjson.OPT_APPEND_NEWLINE) == line
        assert list(f) == ["request_id", "scenario", "seq", "offset", "size", "t_ms", "event", "ts"]

"""The ``compress`` fault (docs/faults-transport.md, ``compress``): upstream bytes in, the
exact actions out, through the real Pipeline."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Cut, Send
from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.compress import CompressConfig
from chaosproxy.core.faults.cut import CutConfig
from tests.support.fault_http import UPSTREAM_HEADERS, fault
from tests.support.fault_transport import BODY, DONE, E1, E2, body, ordinals, run


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_compress_each_flushes_every_write(encoding: str, wbits: int) -> None:
    cfg = CompressConfig.model_validate({"encoding": encoding})
    out, p = run([("compress", cfg)])
    sends = [a for a in out if isinstance(a, Send)]
    assert len(sends) == 4  # one per event, then the stream's tail
    assert [s.ends for s in sends] == [1, 1, 1, 0]
    assert all(s.faults == ("compress",) for s in sends)
    assert [ordinals(s) for s in sends] == [[1], [2], [3], []]
    # Each write decompresses, on its own and in order, to exactly its event.
    d = zlib.decompressobj(wbits)
    assert [d.decompress(s.data) for s in sends] == [E1, E2, DONE, b""]
    assert d.eof
    assert zlib.decompress(body(out), wbits) == BODY
    assert p.summary() == ({"compress": 3}, [])


def test_compress_end_buffers_until_the_end() -> None:
    out, _ = run([("compress", CompressConfig(flush="end"))])
    # The compressor keeps this small body entirely: the client sees one write at the end.
    assert len(out) == 1
    tail = out[0]
    assert isinstance(tail, Send)
    assert (tail.ends, tail.faults, ordinals(tail)) == (3, ("compress",), [1, 2, 3])
    assert zlib.decompress(tail.data, 31) == BODY


def test_compress_end_emits_when_the_compressor_does() -> None:
    # Incompressible bytes overflow zlib's buffers: output comes before the end.
    chunks = [fault_rng(3, 0, "data").randbytes(40_000) for _ in range(3)]
    out, _ = run(
        [("compress", CompressConfig(flush="end", encoding="deflate"))], *chunks, fmt="raw"
    )
    sends = [a for a in out if isinstance(a, Send)]
    assert len(sends) > 1 and all(s.data for s in sends)
    assert sum(s.ends for s in sends) == 3
    assert [o for s in sends for o in ordinals(s)] == [1, 2, 3]
    assert zlib.decompress(body(out), 15) == b"".join(chunks)


def test_compress_passes_a_cut_through_and_the_body_stays_truncated() -> None:
    out, _ = run([("cut", CutConfig(after=2)), ("compress", CompressConfig())])
    assert isinstance(out[-1], Cut)
    d = zlib.decompressobj(31)
    assert d.decompress(body(out)) == E1 + E2
    assert not d.eof


def test_compress_empty_body_is_a_valid_empty_stream() -> None:
    out, p = run([("compress", CompressConfig())], b"")
    assert zlib.decompress(body(out), 31) == b""
    assert p.summary()[1] == [{"fault": "compress", "position": 0, "reason": "the body was empty"}]


@pytest.mark.parametrize(
    ("config", "params", "message"),
    [
        (CompressConfig, {"encoding": "br"}, "'gzip' or 'deflate'"),
        (CompressConfig, {"flush": "never"}, "'each' or 'end'"),
    ],
)
def test_bad_configs_fail_with_a_clear_message(
    config: type[FaultConfig], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.model_validate(params)
    assert message in str(info.value)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compress_sets_content_encoding_and_drops_content_length(encoding: str) -> None:
    f = fault("compress", CompressConfig.model_validate({"encoding": encoding}))
    headers = {**UPSTREAM_HEADERS, "content-encoding": "identity"}
    assert f.response_headers(200, headers) == {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Request-Id": "abc",
        "Content-Encoding": encoding,
    }

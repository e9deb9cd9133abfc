"""The frame line of a plain write (no events, no content), rendered from its numbers.

``frame_line(prefix, seq, offset, size, t_ms, ts)`` gives the bytes of
``orjson.dumps({**context, "seq": seq, "offset": offset, "size": size, "t_ms": t_ms,
"event": "frame", "ts": ts})`` and a newline, from ``prefix``, the JSON text of
``context`` without its closing brace (:func:`chaosproxy.observe.logs.json_prefix`:
non-empty), and ``ts`` as ASCII bytes (the frame log's stamp, put in as it is): the line
of every write of a passthrough response, made without a dict of its fields and without
orjson's generic walk (issue 34: docs/benchmark.md, docs/architecture.md "Compiled
modules").

It returns None, and the caller renders the line the general way, for what it does not
render exactly as orjson does: an argument not of its exact type (a ``bool`` for an
``int``), an integer beyond 64 bits, a ``t_ms`` that is not a whole number of
thousandths of a millisecond from 0 to 10**12 (``round_ms`` makes them: its float is
the one nearest to ``thousandths / 1000``, whose shortest text, Python's and orjson's,
is those thousandths' decimals), ``-0.0``, or a stamp longer than 48 bytes.

This module is the Python twin of ``frameline.c``, the same routine in C: where the
wheel is compiled, the extension module of the same name is what ``import`` finds (a
compiled module shadows its source); the pure build and ``CHAOSPROXY_PURE=1`` run this
file (interpreted, it costs more than orjson's way did: docs/benchmark.md). Both
give the same bytes, and the same None, for the same arguments
(tests/observe/test_frameline.py).
"""

from __future__ import annotations

import math
from typing import Final

#: Which twin this is (``native``: the C one).
KIND: Final = "python"

#: The bounds of a 64-bit integer (orjson writes integers up to 64 bits).
_LOW: Final = -(2**63)
_HIGH: Final = 2**63
#: ``t_ms`` is rendered below this many thousandths (10**12 milliseconds).
_MAX_THOUSANDTHS: Final = 10**15
_copysign: Final = math.copysign


def frame_line(
    prefix: bytes, seq: int, offset: int, size: int, t_ms: float, ts: bytes
) -> bytes | None:
    """The frame line's bytes, or None (the module's docstring says when)."""
    # (one condition and one formatting: in the pure build this is interpreted, once
    # a write; ``%a`` of such a float is its shortest text, those thousandths' digits)
    if (
        type(prefix) is bytes
        and type(ts) is bytes
        and type(t_ms) is float
        and type(seq) is int
        and type(offset) is int
        and type(size) is int
        and _LOW <= seq < _HIGH
        and _LOW <= offset < _HIGH
        and _LOW <= size < _HIGH
        and len(ts) <= 48
        and 0.0 <= (scaled := t_ms * 1000.0) < _MAX_THOUSANDTHS
        and _copysign(1.0, t_ms) > 0.0
        and round(scaled) / 1000.0 == t_ms  # (half to even, as C's nearbyint)
    ):
        return b'%s,"seq":%d,"offset":%d,"size":%d,"t_ms":%a,"event":"frame","ts":"%s"}\n' % (
            prefix,
            seq,
            offset,
            size,
            t_ms,
            ts,
        )
    return None

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
file. Both give the same bytes, and the same None, for the same arguments
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


def frame_line(
    prefix: bytes, seq: int, offset: int, size: int, t_ms: float, ts: bytes
) -> bytes | None:
    """The frame line's bytes, or None (the module's docstring says when)."""
    if (
        type(prefix) is not bytes
        or type(ts) is not bytes
        or type(t_ms) is not float
        or type(seq) is not int
        or type(offset) is not int
        or type(size) is not int
        or not (_LOW <= seq < _HIGH and _LOW <= offset < _HIGH and _LOW <= size < _HIGH)
        or len(ts) > 48
    ):
        return None
    scaled = t_ms * 1000.0
    if not (0.0 <= scaled < _MAX_THOUSANDTHS) or math.copysign(1.0, t_ms) < 0.0:
        return None
    thousandths = round(scaled)  # (half to even, as C's nearbyint)
    if thousandths / 1000.0 != t_ms:
        return None
    whole, frac = divmod(thousandths, 1000)
    decimals = b"%03d" % frac
    decimals = decimals.rstrip(b"0") or b"0"
    return b'%s,"seq":%d,"offset":%d,"size":%d,"t_ms":%d.%s,"event":"frame","ts":"%s"}\n' % (
        prefix,
        seq,
        offset,
        size,
        whole,
        decimals,
        ts,
    )

"""The frame log of several workers (chaosproxy/workers/logfile.py): line writers of two
processes append whole lines to one file, and the relay passes on whole lines only
(a worker killed mid-line: its part, ended)."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from pathlib import Path

import orjson

from chaosproxy.workers.logfile import Relay
from tests.support import spawned


def test_line_writers_of_two_processes_append_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "frames.log"
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        pool.starmap(spawned.append_lines, [(str(path), w) for w in (0, 1)])
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert Counter(line["w"] for line in lines) == {0: 3000, 1: 3000}
    for worker in (0, 1):  # each worker's lines in its own order
        assert [line["n"] for line in lines if line["w"] == worker] == list(range(3000))


async def test_the_relay_passes_whole_lines_only() -> None:
    out: list[bytes] = []
    relay = Relay(out.append)
    wire = b'{"a":1}\n{"b":2}\n{"c":3}\n'
    for cut in (1, 9, 10, 20):
        relay.data_received(wire[:cut])
        relay.data_received(wire[cut:])
    assert all(chunk.endswith(b"\n") for chunk in out)
    assert b"".join(out) == wire * 4
    relay.data_received(b'{"torn"')
    relay.connection_lost(None)  # a worker killed mid-line: the part, ended
    assert out[-1] == b'{"torn"\n'
    assert relay.done.done()

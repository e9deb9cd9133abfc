"""What a fleet's shared state costs: ``--state redis://…`` against ``memory``.

    python benchmarks/fleet.py            # a real redis-server on loopback, ~1 minute
    python benchmarks/fleet.py --smoke    # seconds: checks it runs

One ``chaosproxy serve`` in front of its built-in mock, started once per state, and a
load generator in this process. Measured from the proxy's own CPU time
(``/proc/PID/stat``, user + system) around each phase:

- **per request**: sequential short requests (one token each) under a scenario that
  counts ordinals (``requests: [1]``): what the round trip of the fleet's counters costs;
- **per event**: streams of many events under a ``resume:`` scenario, which an owner
  mirrors into Redis (events batched per upstream read by a background task): what
  mirroring costs per event.

docs/fleet.md gives the figures of a run on this project's two-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "counted.yaml": "requests: [1]\nfaults:\n  - headers: {set: {X-Counted: 'yes'}}\n",
    "mirrored.yaml": "resume: {policy: resume}\nfaults:\n  - ids: {retry: 100}\n",
}
BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_port(port: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def measure(
    state: str, tmp: Path, requests: int, streams: int, tokens: int
) -> dict[str, Any]:
    port = free_port()
    argv = [
        sys.executable, "-m", "chaosproxy", "serve", "--listen", f"127.0.0.1:{port}",
        "--admin", "off", "--scenarios", str(tmp), "--state", state,
        "--mock-interval-ms", "0", "--log", str(tmp / f"{state.split(':')[0]}.jsonl"),
    ]  # fmt: skip
    errors = tmp / "stderr"
    with errors.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(*argv, cwd=tmp, stderr=err)
    try:
        try:
            await wait_port(port)
        except OSError:
            raise SystemExit(f"chaosproxy serve did not start: {errors.read_text()}") from None
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        out: dict[str, Any] = {}
        async with aiohttp.ClientSession() as session:
            for _ in range(20):  # warm up
                async with session.post(url, json=BODY, headers={"X-Mock-Tokens": "1"}) as r:
                    await r.read()
            before, began = cpu_seconds(proc.pid), time.perf_counter()
            for _ in range(requests):
                headers = {"X-Chaos-Scenario": "counted", "X-Mock-Tokens": "1"}
                async with session.post(url, json=BODY, headers=headers) as r:
                    await r.read()
            out["request_cpu_us"] = (cpu_seconds(proc.pid) - before) / requests * 1e6
            out["request_wall_us"] = (time.perf_counter() - began) / requests * 1e6
            before = cpu_seconds(proc.pid)
            events = 0
            for _ in range(streams):
                headers = {"X-Chaos-Scenario": "mirrored", "X-Mock-Tokens": str(tokens)}
                async with session.post(url, json=BODY, headers=headers) as r:
                    events += (await r.read()).count(b"\n\n")
            await asyncio.sleep(0.5)  # the mirror's last writes, in the proxy's CPU too
            out["event_cpu_us"] = (cpu_seconds(proc.pid) - before) / events * 1e6
            out["events"] = events
        return out
    finally:
        proc.terminate()
        await proc.wait()


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few requests: checks it runs")
    args = parser.parse_args(argv)
    redis = shutil.which("redis-server")
    if redis is None:
        print("benchmarks/fleet.py: redis-server is not installed (apt-get install redis-server)")
        return 2
    requests, streams, tokens = (20, 2, 50) if args.smoke else (2000, 40, 500)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for file, text in SCENARIOS.items():
            (tmp / file).write_text(text)
        port = free_port()
        server = await asyncio.create_subprocess_exec(
            redis, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", name,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await wait_port(port)
            memory = await measure("memory", tmp, requests, streams, tokens)
            shared = await measure(f"redis://127.0.0.1:{port}/0", tmp, requests, streams, tokens)
        finally:
            server.terminate()
            await server.wait()
    print(f"{'':24}{'memory':>12}{'redis':>12}{'redis/memory':>14}")
    for key, label in (
        ("request_cpu_us", "CPU per request (µs)"),
        ("request_wall_us", "wall per request (µs)"),
        ("event_cpu_us", "CPU per event (µs)"),
    ):
        a, b = memory[key], shared[key]
        print(f"{label:24}{a:12.1f}{b:12.1f}{b / a:14.2f}")
    print(f"({requests} requests, {streams} streams of {shared['events']} events in all)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Bad inputs that must get a plain answer (issue 21, the audit's cases replayed).

- A seed of thousands of digits, wherever a seed is given (``--seed``,
  ``CHAOSPROXY_SEED``, ``simulate --seed``, ``matrix --seed``, ``X-Chaos-Seed``, a
  scenario's ``seed:``), got Python's "Exceeds the limit (4300 digits)" message or a
  traceback; now one line with the allowed range (exit 2, 400, or ``FILE:LINE``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from chaosproxy.api import ChaosProxy
from chaosproxy.config import ConfigError
from tests.conftest import REPO, LogCapture, ProxyFactory
from tests.upstream import Script, ScriptedUpstream

HUGE = "9" * 5000
RANGE = "from 0 to 9223372036854775807"
#: What Python says of a string of more than 4300 digits (never to be seen).
PYTHONS = ("Exceeds the limit", "4300", "int_max_str_digits", "Traceback")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaosproxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line on stderr of a command that exited 2, with none of Python's text."""
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[:2000]
    assert not [p for p in PYTHONS if p in result.stderr], result.stderr[:2000]
    assert len(lines[0]) < 300
    return lines[0]


# --------------------------------------------------------------------------- seeds


@pytest.mark.parametrize(
    ("args", "env", "prefix"),
    [
        (["serve", "--seed", HUGE], {}, "chaosproxy serve: error: argument --seed: "),
        (["serve", "--admin", "off"], {"CHAOSPROXY_SEED": HUGE}, "chaosproxy: error: "),
        (["simulate", "drop-third-delta", "--seed", HUGE], {}, "chaosproxy simulate: error: "),
        (["matrix", "--client", "true", "--seed", HUGE], {}, "chaosproxy matrix: error: "),
    ],
)
def test_a_seed_of_thousands_of_digits_is_one_line_with_the_range(
    args: list[str], env: dict[str, str], prefix: str
) -> None:
    line = one_line(cli(*args, env=env))
    assert line.startswith(prefix), line
    assert f"expected a decimal integer {RANGE}, got '9999" in line
    assert "(5000 characters)" in line


def test_the_python_api_refuses_a_seed_out_of_range() -> None:
    for seed in (10**5000, -1, 2**63):
        with pytest.raises(ConfigError, match=f"seed: expected an integer {RANGE}"):
            ChaosProxy(seed=seed)


async def test_an_x_chaos_seed_of_thousands_of_digits_is_400_with_the_range(
    make_proxy: ProxyFactory, upstream: ScriptedUpstream, log_capture: LogCapture
) -> None:
    upstream.route("/v1/stream", Script.events(b"data: 1\n\n"))
    proxy = await make_proxy(upstream=upstream.url)
    async with (
        aiohttp.ClientSession() as s,
        s.get(proxy.url + "/v1/stream", headers={"X-Chaos-Seed": HUGE}) as resp,
    ):
        body = await resp.json()
        request_id = resp.headers["X-Chaos-Request-Id"]
    assert resp.status == 400
    message = body["error"]["message"]
    assert message.startswith(f"X-Chaos-Seed must be a decimal integer {RANGE}, got '999")
    assert not [p for p in PYTHONS if p in message] and len(message) < 200
    assert upstream.seen == []  # never forwarded
    end = await log_capture.wait_end(request_id)
    assert end["outcome"] == "proxy_error" and "4300" not in str(end)


def huge_seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yaml"
    path.write_text(f"name: huge\nseed: {HUGE}\nfaults:\n  - rechunk: {{size: 1}}\n")
    return path


def test_a_scenario_seed_of_thousands_of_digits_is_located(tmp_path: Path) -> None:
    path = huge_seed_file(tmp_path)
    want = f"{path}:2: seed: must be an integer {RANGE} (this one has 5000 digits)"
    result = cli("validate", str(path))
    assert (result.returncode, result.stdout.strip(), result.stderr) == (2, want, "")
    assert one_line(cli("serve", "--admin", "off", "--scenarios", str(path))) == (
        f"chaosproxy: error: {want}"
    )
    assert one_line(cli("simulate", str(path))) == want
    # A number elsewhere in the file is refused the same way, at its line.
    other = tmp_path / "other.yaml"
    other.write_text(f"name: other\nfaults:\n  - rechunk: {{size: {HUGE}}}\n")
    result = cli("validate", str(other))
    assert result.returncode == 2 and result.stdout.strip() == (
        f"{other}:3: faults[0].rechunk.size: must be an integer of at most 100 digits "
        "(this one has 5000 digits)"
    )


async def test_a_scenario_seed_of_thousands_of_digits_posted_to_the_admin(
    make_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = await make_proxy(admin=("127.0.0.1", 0))
    assert proxy.admin_url is not None
    for content_type, body in [
        ("application/yaml", huge_seed_file(tmp_path).read_bytes()),
        ("application/json", b'{"name": "huge", "seed": %s, "faults": []}' % HUGE.encode()),
    ]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                proxy.admin_url + "/scenarios", data=body, headers={"Content-Type": content_type}
            ) as resp,
        ):
            answer = await resp.json()
        assert resp.status == 400, answer
        assert answer["problems"] == [
            f"body:{2 if 'yaml' in content_type else 1}: seed: must be an integer {RANGE} "
            "(this one has 5000 digits)"
        ]

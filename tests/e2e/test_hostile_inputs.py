"""Bad inputs that must get a plain answer (issue 21, the audit's cases replayed).

- A seed of thousands of digits, wherever a seed is given (``--seed``,
  ``CHAOSPROXY_SEED``, ``simulate --seed``, ``matrix --seed``, ``X-Chaos-Seed``, a
  scenario's ``seed:``), got Python's "Exceeds the limit (4300 digits)" message or a
  traceback; now one line with the allowed range (exit 2, 400, or ``FILE:LINE``).
- A FIFO as ``--upstream-ca`` blocked start-up and ignored SIGTERM; a pass-phrase-
  protected key waited at a prompt. Now each is one line and exit 2 at start, before
  anything opens the file.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from chaosproxy.control.api import ChaosProxy
from chaosproxy.server.config import ConfigError
from tests.support.cli import chaosproxy_argv, run_cli
from tests.support.proxies import LogCapture, ProxyFactory
from tests.support.repo import REPO
from tests.support.scripted_upstream import Script, ScriptedUpstream

HUGE = "9" * 5000
RANGE = "from 0 to 9223372036854775807"
#: What Python says of a string of more than 4300 digits (never to be seen).
PYTHONS = ("Exceeds the limit", "4300", "int_max_str_digits", "Traceback")


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
    line = one_line(run_cli(*args, env=env))
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
    result = run_cli("validate", str(path))
    assert (result.returncode, result.stdout.strip(), result.stderr) == (2, want, "")
    assert one_line(run_cli("serve", "--admin", "off", "--scenarios", str(path))) == (
        f"chaosproxy: error: {want}"
    )
    assert one_line(run_cli("simulate", str(path))) == want
    # A number elsewhere in the file is refused the same way, at its line.
    other = tmp_path / "other.yaml"
    other.write_text(f"name: other\nfaults:\n  - rechunk: {{size: {HUGE}}}\n")
    result = run_cli("validate", str(other))
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


# --------------------------------------------------------------------------- TLS files


async def serve_until_exit(*args: str) -> tuple[int, str, bool]:
    """``serve ARGS`` as a process: (exit code, stderr, whether SIGTERM had to be sent).
    It gets 15 s to exit on its own; then a SIGTERM, and 5 s more, and then it is
    killed (a start-up that ignores SIGTERM fails the test, never hangs it)."""
    proc = await asyncio.create_subprocess_exec(
        *chaosproxy_argv(), "serve", "--listen", "127.0.0.1:0",
        "--admin", "off", *args,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # no terminal: a pass-phrase prompt cannot be answered
    )  # fmt: skip
    signalled = False
    try:
        async with asyncio.timeout(15):
            await proc.wait()
    except TimeoutError:
        signalled = True
        proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(5):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail("start-up hung and ignored SIGTERM")
    assert proc.stderr is not None
    return proc.returncode or 0, (await proc.stderr.read()).decode(), signalled


def fifo(tmp_path: Path) -> str:
    path = tmp_path / "ca.fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    ("flags", "what"),
    [
        (lambda d, c, k: ["--upstream-ca", fifo(d)], "--upstream-ca {} is a FIFO"),
        (lambda d, c, k: ["--upstream-cert", fifo(d), "--upstream-key", k], "is a FIFO"),
        (lambda d, c, k: ["--upstream-cert", c, "--upstream-key", fifo(d)], "is a FIFO"),
        (lambda d, c, k: ["--upstream-ca", "/dev/null"], "--upstream-ca /dev/null is a device"),
        (lambda d, c, k: ["--upstream-cert", str(d), "--upstream-key", k], "is a directory"),
        (lambda d, c, k: ["--upstream-cert", c, "--upstream-key", str(d)], "is a directory"),
    ],
)
async def test_a_tls_file_that_is_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, client_files: tuple[str, str], flags: object, what: str
) -> None:
    cert, key = client_files
    args = flags(tmp_path, cert, key)  # type: ignore[operator]
    code, stderr, signalled = await serve_until_exit("--upstream", "https://localhost:1", *args)
    assert not signalled, "start-up waited on the file"
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert what.format(args[1]) in lines[0] and "not a regular file" in lines[0], lines[0]
    assert lines[0].startswith("chaosproxy: error: ")


@pytest.fixture
def client_files(tmp_path: Path) -> tuple[str, str]:
    cert = trustme.CA().issue_cert("client.chaosproxy.test")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return str(cert_file), str(key_file)


PASS_PHRASE = b"correct horse battery staple"


def encrypted(key_file: str, form: str) -> bytes:
    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), password=None)
    fmt = {
        "pkcs8": serialization.PrivateFormat.PKCS8,
        "traditional": serialization.PrivateFormat.TraditionalOpenSSL,
    }[form]
    return key.private_bytes(
        serialization.Encoding.PEM, fmt, serialization.BestAvailableEncryption(PASS_PHRASE)
    )


def locked(tmp_path: Path, cert: str, key: str, form: str, where: str) -> tuple[list[str], str]:
    """The flags that give an encrypted key (its own file, or after the certificate in
    the certificate's file), and the start of the line that refuses it."""
    locked = encrypted(key, form)
    if where == "key":
        path = tmp_path / "locked.key"
        path.write_bytes(locked)
        return ["--upstream-cert", cert, "--upstream-key", str(path)], f"--upstream-key {path}"
    path = tmp_path / "both.pem"
    path.write_bytes(Path(cert).read_bytes() + locked)
    return ["--upstream-cert", str(path)], f"--upstream-cert {path}"


@pytest.mark.parametrize("form", ["pkcs8", "traditional"])
@pytest.mark.parametrize("where", ["key", "cert"])
async def test_an_encrypted_key_is_refused_without_a_prompt(
    tmp_path: Path, client_files: tuple[str, str], form: str, where: str
) -> None:
    args, which = locked(tmp_path, *client_files, form, where)
    code, stderr, signalled = await serve_until_exit("--upstream", "https://localhost:1", *args)
    assert not signalled, "start-up waited for a pass phrase"
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert lines[0] == (
        f"chaosproxy: error: {which} is an encrypted (pass-phrase protected) private "
        "key; chaosproxy cannot ask for its pass phrase: give the key unencrypted "
        "(openssl pkey -in KEY -out PLAIN)"
    )
    assert "PEM pass phrase" not in stderr and "PRIVATE KEY-----" not in stderr

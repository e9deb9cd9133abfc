"""The suite's fork server for Python clients (tests/clients/zygote.py) runs a client as
``python SCRIPT`` would: its argv, environment, working directory, streams and exit
status, in a session of its own; a client whose shim is killed (the matrix's time out)
is killed too; and a client that comes while the server still imports waits for it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from chaosproxy.tools.matrix import run_command
from tests.support.forks import ForkServer

SCRIPT = """\
import os, sys
print("argv", sys.argv[1:], "env", os.environ.get("ZYGOTE_TEST"), "cwd", os.getcwd())
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["sleep"]:
    open(sys.argv[0] + ".pid", "w").write(str(os.getpid()))
    import time; time.sleep(60)
sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
"""


def test_a_client_gets_its_argv_env_cwd_streams_and_exit_status(
    python_clients: ForkServer, tmp_path: Path
) -> None:
    # As the matrix runs a client (in a shell, its own process group).
    env = {"PATH": os.environ["PATH"], "ZYGOTE_TEST": "yes"}
    done = run_command(f"cd {tmp_path} && {_client(python_clients, tmp_path, '3')}", env, 30)
    assert done.exit_code == 3
    assert done.stdout == f"argv ['3'] env yes cwd {tmp_path}\n"
    assert done.stderr == "to stderr\n"
    env = {"PATH": os.environ["PATH"], "CHAOSPROXY_SCENARIO": "s"}
    module = run_command(
        python_clients.command("-m", "tests.clients.record", tmp_path, "true"), env, 30
    )
    assert module.exit_code == 0, module.stderr
    assert (tmp_path / "s.json").read_text() == '[{"stdout": "", "exit": 0}]'


def test_a_client_whose_shim_is_killed_is_killed(
    python_clients: ForkServer, tmp_path: Path
) -> None:
    # The matrix's time out kills the shim's process group; the server kills the client.
    timed_out = run_command(_client(python_clients, tmp_path, "sleep"), dict(os.environ), 3.0)
    assert timed_out.exit_code is None
    client = int((tmp_path / "client.py.pid").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{client}").exists() and "Z" not in _state(client):
        assert time.monotonic() < deadline, "the client outlived its shim"
        time.sleep(0.01)


def _client(python_clients: ForkServer, tmp_path: Path, arg: str) -> str:
    """The shell command that runs SCRIPT, written to tmp_path/client.py, with ``arg``."""
    script = tmp_path / "client.py"
    script.write_text(SCRIPT)
    return python_clients.command(script, arg)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "Z"


def test_a_client_has_a_session_of_its_own(python_clients: ForkServer, tmp_path: Path) -> None:
    # No controlling terminal: nothing a client runs can prompt on the suite's terminal.
    script = tmp_path / "session.py"
    script.write_text("import os\nprint(os.getsid(0) == os.getpid())\n")
    done = run_command(python_clients.command(script), dict(os.environ), 30)
    assert (done.exit_code, done.stdout) == (0, "True\n"), done.stderr


def test_a_client_that_comes_before_the_imports_are_done_is_served(tmp_path: Path) -> None:
    # A server whose import waits for a file: it listens meanwhile, and this client's
    # request waits in its backlog until the import is done (it runs after the file is
    # there); had the server not listened yet, its shim would have failed to connect.
    opened = tmp_path / "open"
    (tmp_path / "blocking_import.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(opened)!r}):\n    time.sleep(0.01)\n"
    )
    after = tmp_path / "after.py"
    after.write_text(f"import os\nprint(os.path.exists({str(opened)!r}))\n")
    (tmp_path / "server").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(tmp_path))
        server = ForkServer(["blocking_import"], tmp_path / "server", wait=False)
    try:
        early = subprocess.Popen(server.argv(after), stdout=subprocess.PIPE, text=True)
        opened.touch()
        out, _ = early.communicate(timeout=30)
        assert (early.returncode, out) == (0, "True\n")
        server.wait_ready()
        handle = ForkServer.attach(server.path)
        again = subprocess.run(handle.argv(after), capture_output=True, text=True, timeout=30)
        assert again.stdout == "True\n"
        handle.close()  # (a handle: the server goes on)
        assert subprocess.run(server.argv(after), capture_output=True, timeout=30).returncode == 0
    finally:
        server.close()

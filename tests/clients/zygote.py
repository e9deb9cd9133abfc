"""A fork server for the suite's Python matrix clients: it imports the clients' heavy
libraries (the openai SDK, httpx, httpx-sse) once, then runs each client in a process
forked from it, so a run costs a fork instead of a fresh interpreter and a second of
imports. Each client is still a process of its own, run as ``python SCRIPT ARGS`` or
``python -m MODULE ARGS`` would run it (its ``__main__``, its own ``sys.argv``,
environment, working directory, standard streams and exit status), over real sockets.

``chaosproxy matrix`` runs a client command in a shell and kills its process group on
time out; the command here is the shim (tests/clients/zygote_shim.py, a bare
interpreter with no site packages), which hands the server its argv, environment,
working directory and its own standard streams (``SCM_RIGHTS``), passes on the signals
it is sent (SIGTERM, SIGINT, SIGHUP) to the client, and exits with the client's status.
When the shim dies (killed with its group), the server kills the client it forked for
it.

The server is single-threaded (forking a threaded process is unsafe) and imports
nothing that starts a thread; it waits on its socket, its shims' connections and its
children's pidfds with one selector.

    python -m tests.clients.zygote SOCKET MODULE...   (serves until stdin closes)

It says ``listening`` once it listens, and ``ready`` once it has imported MODULE...
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import cast


def run_client(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """In the forked child: run ``python ARGV`` in this process; its exit status."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def fork_client(conn: socket.socket, listener: socket.socket) -> int | None:
    """Read a shim's request from ``conn`` and fork its client; the child's pid (None:
    the shim went away before it asked)."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if not message or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:  # the client
        code = 1
        try:
            os.setsid()  # no controlling terminal: nothing it runs can prompt on one
            listener.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = run_client(request["argv"], request["env"], request["cwd"])
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    return pid


def status_of(wait_status: int) -> int:
    """A child's wait status as the shim exits with it (a signal: negative)."""
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


def serve(path: str, preload: list[str]) -> None:
    # Listening before the imports: a shim that comes meanwhile waits in the backlog.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    print("listening", flush=True)
    for name in preload:  # (what is not installed, a client imports itself, and fails)
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("accept",))
    selector.register(sys.stdin, selectors.EVENT_READ, ("stdin",))
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            what = key.data
            if what[0] == "stdin":  # the suite is done with us (its end of the pipe closed)
                if not cast(io.BufferedReader, sys.stdin.buffer).read1(4096):
                    return
            elif what[0] == "accept":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, ("request", conn))
            elif what[0] == "request":
                conn = what[1]
                selector.unregister(conn)
                pid = fork_client(conn, listener)
                if pid is None:
                    conn.close()
                    continue
                with contextlib.suppress(OSError):  # (the shim forwards signals to it)
                    conn.send(f"pid {pid}".encode())
                selector.register(conn, selectors.EVENT_READ, ("shim", pid))
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, ("exit", pid, conn))
            elif what[0] == "shim":  # the shim died (killed with its group): so does its client
                selector.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(what[1], signal.SIGKILL)
            else:  # a client exited: its shim exits with its status
                _, pid, conn = what
                selector.unregister(key.fd)
                os.close(key.fd)
                _, wait_status = os.waitpid(pid, 0)
                if conn.fileno() != -1:
                    selector.unregister(conn)
                    with contextlib.suppress(OSError):
                        conn.send(str(status_of(wait_status)).encode())
                    conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])

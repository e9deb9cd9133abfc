"""The command ``chaosproxy matrix`` runs for a client of the fork server
(tests/clients/zygote.py): it asks the server to run ``python ARGS...`` with this
process's environment, working directory and standard streams, and exits with that
client's status; the signals it is sent (SIGTERM, SIGINT, SIGHUP) go on to the
client. Run with ``python -I -S`` (no site packages: it starts in ~10 ms).

    python -I -S tests/clients/zygote_shim.py SOCKET ARGS...
"""

import json
import os
import signal
import socket
import sys


def main() -> int:
    path, argv = sys.argv[1], sys.argv[2:]
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        started = conn.recv(64).split()
        if len(started) != 2:
            return 1
        client = int(started[1])
        for forwarded in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(forwarded, lambda signum, _: os.kill(client, signum))
        status = int(conn.recv(64) or b"1")
    if status < 0:  # the client was killed by a signal: so is the shim
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main())

"""The command ``chaosproxy matrix`` runs for a client of the fork server
(tests/clients/zygote.py): it asks the server to run ``python ARGS...`` with this
process's environment, working directory and standard streams, and exits with that
client's status. Run with ``python -I -S`` (no site packages: it starts in ~10 ms).

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
        status = int(conn.recv(64) or b"1")
    if status < 0:  # the client was killed by a signal: so is the shim
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main())

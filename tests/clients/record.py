"""Run a `chaosproxy matrix` client command and keep what it printed: its stdout and
exit status go, as JSON, to ``DIR/<CHAOSPROXY_SCENARIO>.json`` (a list, one item per
run), and are passed on unchanged. The oracle of tests/tools/test_verdict_oracle.py reads
them: the matrix's own files say what the proxy judged, not what the client printed.

    python -m tests.clients.record DIR CMD...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    out, command = Path(sys.argv[1]), sys.argv[2:]
    done = subprocess.run(command, stdout=subprocess.PIPE, check=False)
    path = out / f"{os.environ.get('CHAOSPROXY_SCENARIO', 'none')}.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append({"stdout": done.stdout.decode("utf-8", "replace"), "exit": done.returncode})
    path.write_text(json.dumps(runs))
    sys.stdout.buffer.write(done.stdout)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Records that a server phase ended: whether the server was still alive, its exit status and
what it wrote to stderr (warnings/errors only; the bench runs it at log level warning).

    event.py RESULTS NAME ALIVE(0|1) EXIT_STATUS STDERR_FILE
"""

import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402

res, name, alive, status, err = sys.argv[1:6]
try:
    lines = open(err, errors="replace").read().splitlines()
except OSError:
    lines = []
# The bench sets the connection limit to the descriptor limit on purpose; that warning is expected.
notable = [l for l in lines if "open-file limit is below the connection limit" not in l]
rawhttp.emit(res, {
    "kind": "server_stop", "name": name, "alive_at_end": alive == "1", "exit_status": int(status),
    "stderr_lines": len(notable), "stderr_tail": notable[-5:],
})

"""The fault-injection suite (issue 15 item 5). FAULTS_MODE=short (make test) or long
(make faults); STATE_SERVER_BIN names the binary (default .build/debug/state-server)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

LONG = os.environ.get("FAULTS_MODE", "short") == "long"


def pytest_report_header(config):
    from harness.cluster import binary
    return [f"faults: mode {'long' if LONG else 'short'}, binary {binary()}"]

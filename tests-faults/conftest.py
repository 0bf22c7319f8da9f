"""The fault-injection suite (issue 15 item 5). FAULTS_MODE=short (make test) or long
(make faults); STATE_SERVER_BIN names the binary (default .build/debug/state-server)."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))

LONG = os.environ.get("FAULTS_MODE", "short") == "long"


def _interrupted(signum, frame):
    # SIGTERM (the step's time limit) ends the run like Ctrl-C: fixtures stop their clusters.
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _interrupted)


def pytest_report_header(config):
    from harness.cluster import binary
    return [f"faults: mode {'long' if LONG else 'short'}, binary {binary()}"]


import pytest  # noqa: E402


@pytest.fixture
def make_cluster(request):
    """Starts a cluster (harness/cluster.py) per call; every one is stopped and removed after
    the test, passed or failed."""
    from harness.cluster import Cluster
    made = []

    def make(**kw):
        c = Cluster(name=request.node.name[:40], **kw)
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        c.close()


def pytest_collection_modifyitems(config, items):
    """The short form (make test) leaves out tests marked long."""
    if LONG:
        return
    skip = pytest.mark.skip(reason="long form only (make faults)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)

#!/usr/bin/env bash
# Runs the browser test (Tests/browser) in headless Chromium against the server binary.
#
#   scripts/browser-test.sh [pytest arguments...]
#
# Installs what is missing first: Debian's chromium and chromium-driver (apt-get, through sudo
# unless root, without recommended packages) and the PyPI packages selenium and pytest (in the
# virtual environment .cache/venv, made by scripts/python-env.sh). The server binary is
# $STATE_SERVER_BIN, or .build/debug/state-server (build it with `swift build`).
# Screenshots and the server's log land in test-artifacts/. Exits with pytest's status.
set -euo pipefail

cd "$(dirname "$0")/.."

# Without recommended packages (no printing system, no avahi): headless Chromium needs none.
bash scripts/lib/apt-install.sh chromium chromium-driver

export PYTHONDONTWRITEBYTECODE=1 # keep __pycache__ out of the repository
# selenium and pytest live in the test tools' virtual environment (.cache/venv), not the system's.
PYTHON=$(bash scripts/python-env.sh)

export STATE_SERVER_BIN="${STATE_SERVER_BIN:-.build/debug/state-server}"
if [ ! -x "$STATE_SERVER_BIN" ]; then
	echo "error: $STATE_SERVER_BIN is missing; build it first (swift build)" >&2
	exit 2
fi

mkdir -p test-artifacts
set +e
"$PYTHON" -m pytest Tests/browser -p no:cacheprovider "$@"
status=$?
set -e
echo "browser test artifacts: $(pwd)/test-artifacts"
exit "$status"

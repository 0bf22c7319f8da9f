#!/usr/bin/env bash
# Makes (or updates) the virtual environment of the test tools and prints its python's path.
#
#   PY=$(bash scripts/python-env.sh)      # then: "$PY" -m pytest ...
#
# The environment lives in .cache/venv (or $STATE_SERVER_VENV), outside the system's Python;
# its packages are those of scripts/requirements-test.txt, installed again only when that file
# changes. Debian's python3 needs python3-venv for `python3 -m venv`: installed with apt-get
# (as root, or through sudo) when missing. Everything but the path goes to standard error.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${STATE_SERVER_VENV:-.cache/venv}
REQUIREMENTS=scripts/requirements-test.txt
PYTHON=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
        bash scripts/lib/apt-install.sh python3-venv >&2
    fi
    echo "creating the test tools' Python environment in $VENV" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" >&2
fi

STAMP="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$STAMP"; then
    echo "installing Python packages into $VENV: $(grep -v '^#' "$REQUIREMENTS" | tr '\n' ' ')" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
    cp "$REQUIREMENTS" "$STAMP"
fi
echo "$(cd "$VENV" && pwd)/bin/python"

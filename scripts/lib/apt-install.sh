#!/usr/bin/env bash
# Installs the Debian packages among PACKAGE... that are not installed yet, quietly:
#
#   bash scripts/lib/apt-install.sh PACKAGE...
#
# Shared by the Makefile (`make deps`) and the scripts that need a tool (browser-test.sh,
# metrics-lint.sh, python-env.sh, cluster.sh). As root, or through sudo. One line says what is
# installed; apt's and debconf's chatter ("debconf: delaying package configuration, since
# apt-utils is not installed", progress lines) is kept out of the output unless the install
# fails, when all of it is printed. DEBIAN_FRONTEND goes through `env`, after sudo, which would
# otherwise drop it.
set -euo pipefail

missing=()
for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -gt 0 ] || exit 0

sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
echo "installing system packages: ${missing[*]}" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o Dpkg::Use-Pty=0)
if "${apt[@]}" update >"$log" 2>&1 && "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
    exit 0
fi
cat "$log" >&2
echo "apt-install.sh: could not install ${missing[*]} (output above)" >&2
exit 1

#!/usr/bin/env bash
# Installs Debian's postgresql server binaries for the tests that run a
# throwaway PostgreSQL (pkg/dev/pgtest) when /usr/lib/postgresql/*/bin has
# none. Only the binaries are needed: the tests run their own clusters, so
# the cluster Debian's package creates and starts is not used.
# Non-interactive; uses sudo only when not root.
set -euo pipefail

for b in /usr/lib/postgresql/*/bin/postgres; do
	if [ -x "$b" ] && [ -x "$(dirname "$b")/initdb" ]; then
		exit 0
	fi
done

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-postgres: PostgreSQL is missing and sudo is not available; run as root: apt-get install -y postgresql" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi

echo "install-postgres: installing Debian's postgresql (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends postgresql
for b in /usr/lib/postgresql/*/bin/postgres; do
	if [ -x "$b" ]; then
		"$b" --version >&2
		exit 0
	fi
done
echo "install-postgres: apt-get finished but no /usr/lib/postgresql/*/bin/postgres exists" >&2
exit 1

#!/usr/bin/env bash
# Installs Debian's postgresql server binaries for the tests that run a
# throwaway PostgreSQL (pkg/dev/pgtest) when /usr/lib/postgresql/*/bin has
# none. Only the binaries are needed: the tests run their own clusters, so
# the cluster Debian's package creates and starts is not used.
# Non-interactive (tools/apt/install.sh); uses sudo only when not root.
set -euo pipefail

for b in /usr/lib/postgresql/*/bin/postgres; do
	if [ -x "$b" ] && [ -x "$(dirname "$b")/initdb" ]; then
		exit 0
	fi
done

"$(dirname "$0")/../../../tools/apt/install.sh" install-postgres postgresql
for b in /usr/lib/postgresql/*/bin/postgres; do
	if [ -x "$b" ]; then
		"$b" --version >&2
		exit 0
	fi
done
echo "install-postgres: apt-get finished but no /usr/lib/postgresql/*/bin/postgres exists" >&2
exit 1

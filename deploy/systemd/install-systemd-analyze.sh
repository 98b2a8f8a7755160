#!/usr/bin/env bash
# Installs Debian's systemd (for systemd-analyze) when it is missing: the
# test of the agent's units (cmd/agent's TestSystemdUnits) runs
# `systemd-analyze verify` on deploy/systemd/*.service and fails without it.
# Nothing is started: only the command is needed. Non-interactive; uses
# sudo only when not root.
set -euo pipefail

if command -v systemd-analyze >/dev/null 2>&1; then
	exit 0
fi

"$(dirname "$0")/../../tools/apt/install.sh" install-systemd-analyze systemd
systemd-analyze --version >&2

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

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-systemd-analyze: systemd-analyze is missing and sudo is not available; run as root: apt-get install -y systemd" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi

echo "install-systemd-analyze: installing Debian's systemd (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends systemd
systemd-analyze --version >&2

#!/usr/bin/env bash
# Installs Debian's chromium for the portal's browser tests when
# /usr/bin/chromium is missing. Non-interactive; uses sudo only when not root.
# The tests drive it with playwright-core: never `npx playwright install`
# (it downloads a browser build of its own).
set -euo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
	exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-browser: $CHROMIUM is missing and sudo is not available; run as root: apt-get install -y chromium" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi

echo "install-browser: installing Debian's chromium (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium
if [ ! -x "$CHROMIUM" ]; then
	echo "install-browser: apt-get finished but $CHROMIUM is still missing" >&2
	exit 1
fi
"$CHROMIUM" --version >&2 || true

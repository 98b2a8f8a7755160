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

"$(dirname "$0")/../../tools/apt/install.sh" install-browser chromium
if [ ! -x "$CHROMIUM" ]; then
	echo "install-browser: apt-get finished but $CHROMIUM is still missing" >&2
	exit 1
fi
"$CHROMIUM" --version >&2 || true

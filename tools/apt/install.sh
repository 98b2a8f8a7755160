#!/usr/bin/env bash
# install.sh WHO PACKAGE...: installs Debian's PACKAGEs with apt-get,
# non-interactively, for the scripts that install what the tests need when
# it is missing (WHO, the calling script's name, starts each message).
# Uses sudo only when not root.
set -euo pipefail
who=$1
shift

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "$who: sudo is not available; run as root: apt-get install -y $*" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi

echo "$who: installing Debian's $* (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "$@"

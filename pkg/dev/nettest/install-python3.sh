#!/usr/bin/env bash
# Installs Debian's python3 when it is missing: the data-plane tests of
# cloud-init (graph's TestUserDataRunsInTheVM, pkg/pvesim/simnet's
# TestCloudInitRunsAtFirstStart) start nettest.FileServerPy in a simulated
# guest from its runcmd, and fail without it. Non-interactive; uses sudo
# only when not root.
set -euo pipefail

if command -v python3 >/dev/null 2>&1; then
	exit 0
fi

"$(dirname "$0")/../../../tools/apt/install.sh" install-python3 python3
python3 --version >&2

#!/usr/bin/env bash
# Installs what a real Kubernetes node of the tests (pkg/dev/kubenode) runs
# besides the kubelet (which `make kube-bin` builds): Debian's containerd
# (the CRI runtime, with ctr and the runc v2 shim), runc, the CNI plugins
# (containernetworking-plugins: bridge, host-local, loopback, portmap) and
# iptables, when one of them is missing. The tests run their own containerd
# with its own configuration and socket, so a containerd service the
# package may start is not used. Non-interactive (tools/apt/install.sh);
# uses sudo only when not root.
set -euo pipefail

missing=
for p in containerd containerd-shim-runc-v2 ctr runc iptables nsenter; do
	command -v "$p" >/dev/null 2>&1 || missing=1
done
for p in bridge host-local loopback portmap; do
	[ -x "/usr/lib/cni/$p" ] || missing=1
done
if [ -z "$missing" ]; then
	exit 0
fi

"$(dirname "$0")/../../../tools/apt/install.sh" install-node containerd runc containernetworking-plugins iptables util-linux
containerd --version >&2

#!/bin/sh
# build.sh OUT: builds kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy as one binary (./cmd/kube) at OUT/kube, from
# the Kubernetes release tools/kube/go.mod pins, with the version ldflags
# that make /version report it (Helm and client version gates read it), and
# links the five names to it. Prints its progress every 30 seconds: a cold build
# compiles about two thousand packages.
set -eu
out=$1
cd "$(dirname "$0")"
go=${GO:-go}
v=$($go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$v" | cut -d. -f2)
total=$($go list -deps ./cmd/kube | wc -l)
mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
echo "kube-bin: building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy $v (one binary, $total packages) into $out"
$go build -v -trimpath -ldflags "-s -w \
	-X k8s.io/component-base/version.gitVersion=$v \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$minor" \
	-o "$out/kube.tmp" ./cmd/kube 2>"$log" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	i=0
	while [ "$i" -lt 30 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 1
		i=$((i + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "kube-bin: $(grep -c . "$log" || true) of at most $total packages compiled, $(($(date +%s) - start))s"
	fi
done
if ! wait "$pid"; then
	grep -v '^[a-zA-Z0-9._/-]*$' "$log" >&2 || cat "$log" >&2
	echo "kube-bin: go build failed" >&2
	exit 1
fi
mv "$out/kube.tmp" "$out/kube"
for name in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
	ln -sf kube "$out/$name"
done
echo "kube-bin: done in $(($(date +%s) - start))s"

#!/bin/sh
# build.sh OUT: builds the OpenTofu CLI that tools/tofu/go.mod pins (with the
# hcl replace OpenTofu's own module carries) at OUT/tofu, with the version
# ldflags that make `tofu version` report it. Prints its progress every 30
# seconds: a cold build compiles about a thousand packages.
set -eu
out=$1
cd "$(dirname "$0")"
go=${GO:-go}
pkg=github.com/opentofu/opentofu/cmd/tofu
v=$($go list -m -f '{{.Version}}' github.com/opentofu/opentofu)
total=$($go list -deps "$pkg" | wc -l)
mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
echo "tofu-bin: building OpenTofu $v ($total packages) into $out"
$go build -v -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
	-o "$out/tofu.tmp" "$pkg" 2>"$log" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	i=0
	while [ "$i" -lt 30 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 1
		i=$((i + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "tofu-bin: $(grep -c . "$log" || true) of at most $total packages compiled, $(($(date +%s) - start))s"
	fi
done
if ! wait "$pid"; then
	grep -v '^[a-zA-Z0-9._/-]*$' "$log" >&2 || cat "$log" >&2
	echo "tofu-bin: go build failed" >&2
	exit 1
fi
mv "$out/tofu.tmp" "$out/tofu"
echo "tofu-bin: done in $(($(date +%s) - start))s"

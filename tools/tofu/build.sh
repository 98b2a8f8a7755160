#!/bin/sh
# build.sh OUT: builds the OpenTofu CLI that tools/tofu/go.mod pins (with the
# hcl replace OpenTofu's own module carries) at OUT/tofu, with the version
# ldflags that make `tofu version` report it as a release. Prints a line
# per 200 packages compiled: a cold build compiles about 1,800.
set -eu
out=$1
cd "$(dirname "$0")"
go=${GO:-go}
pkg=github.com/opentofu/opentofu/cmd/tofu
v=$($go list -m -f '{{.Version}}' github.com/opentofu/opentofu)
mkdir -p "$out"
start=$(date +%s)
echo "tofu-bin: building OpenTofu $v into $out"
# go build -v names each package as it compiles it; errors go on stderr too,
# as do the modules it downloads on a fresh machine (not errors).
if ! $go build -v -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
	-o "$out/tofu.tmp" "$pkg" 2>&1 | awk -v s="$start" '
		/^[a-zA-Z0-9._\/-]+$/ { n++; if (n % 200 == 0) { printf "tofu-bin: %d packages compiled, %ds\n", n, systime() - s; fflush() } next }
		/^go: downloading / { print; next }
		{ print; bad = 1 }
		END { exit bad }'; then
	echo "tofu-bin: go build failed" >&2
	exit 1
fi
mv "$out/tofu.tmp" "$out/tofu"
echo "tofu-bin: done in $(($(date +%s) - start))s"

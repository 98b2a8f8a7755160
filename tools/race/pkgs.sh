#!/bin/sh
# pkgs.sh: the packages the race run tests, one per line: those under ./pkg
# with tests whose own (non-test) code is concurrent (starts goroutines, uses
# package sync or channels), less the ones given as arguments (patterns for
# grep -e), plus those in RACE_ALSO (import paths: packages whose tests drive
# another package's concurrent code in-process). A package without
# concurrency of its own cannot race in its own code; its tests are run by
# the plain run.
set -eu
cd "$(dirname "$0")/../.."
go=${GO:-go}
exclude=""
for p in "$@"; do exclude="$exclude -e $p"; done
$go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}' ./pkg/... |
while read -r pkg dir files; do
	[ -n "$files" ] || continue
	if (cd "$dir" && grep -qE '(^|[[:space:]])go [A-Za-z_(]|sync\.|chan |<-' $files); then
		echo "$pkg"
	fi
done | { if [ -n "$exclude" ]; then grep -v $exclude; else cat; fi; }
for p in ${RACE_ALSO:-}; do echo "$p"; done

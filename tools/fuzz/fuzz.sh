#!/bin/sh
# fuzz.sh DURATION PKG:TARGET...: runs each fuzz target for about DURATION
# (Go's form: 10s, 5m, 1h), one after another, and stops at the first
# failure.
#
# Each target runs for a number of executions, not for a time: a run
# bounded by -fuzztime's duration can end in "context deadline exceeded"
# with no failing input when the coordinator's deadline races its workers
# (Go 1.26), which could not be told apart from a target that hung at the
# end. Bounded by a count, the engine ends cleanly, and anything it reports
# is a failure: a crash (its input written to testdata/fuzz/<Target>/), a
# target that hangs (the engine's own hang detection) or a run that fails.
# The count of each round is the rate the last round measured times the
# time left.
set -eu
go=${GO:-go}
dur=$1
shift
case $dur in
*h) secs=$((${dur%h} * 3600)) ;;
*m) secs=$((${dur%m} * 60)) ;;
*s) secs=${dur%s} ;;
*)
	echo "fuzz: FUZZTIME $dur: want a whole number of s, m or h (10s, 5m, 1h)" >&2
	exit 2
	;;
esac
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	pkg=${t%%:*}
	name=${t#*:}
	echo "== $name ($pkg) for $dur"
	# Rounds of a count each: the first of 2000 executions measures the
	# rate, the next aims at the time left at the rate the last measured,
	# until the time is spent. The time is the engine's own (its last
	# "fuzz: elapsed: Ns"), so building the instrumented test binary does
	# not eat into it; a round counts at least a second.
	start=$(date +%s)
	spent=0
	n=2000
	while :; do
		if ! $go test -run '^$' -fuzz "^$name\$" -fuzztime "${n}x" -timeout 0 "$pkg" >"$log" 2>&1; then
			cat "$log"
			echo "== $name: failed" >&2
			exit 1
		fi
		took=$(sed -n 's/^fuzz: elapsed: \([0-9]*\)s.*/\1/p' "$log" | tail -n 1)
		spent=$((spent + (${took:-0} > 0 ? ${took:-0} : 1)))
		left=$((secs - spent))
		if [ "$left" -le 0 ]; then
			break
		fi
		rate=$(sed -n 's/.*execs: [0-9]* (\([0-9]*\)\/sec).*/\1/p' "$log" | tail -n 1)
		n=$((${rate:-0} * left))
		if [ "$n" -lt 2000 ]; then
			n=2000
		fi
	done
	grep '^fuzz: elapsed' "$log" | tail -n 1
	echo "== $name: passed, ${spent}s of fuzzing in $(($(date +%s) - start))s"
done

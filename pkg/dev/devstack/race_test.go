//go:build race

package devstack_test

// raceEnabled: under -race, TestStack is skipped. Its work happens in child
// processes built without the race detector, so a second run would check
// nothing new; the plain run of `make test` covers it.
const raceEnabled = true

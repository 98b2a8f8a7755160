//go:build !race

package devstack_test

const raceEnabled = false

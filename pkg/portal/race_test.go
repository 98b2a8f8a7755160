//go:build race

package portal_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true

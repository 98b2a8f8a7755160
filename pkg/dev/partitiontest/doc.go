// Package partitiontest holds the test of a zone partitioned off the
// orchestrator by a real network cut: the zone's agents run as processes in
// a network namespace of the test's own, joined to the test's namespace by a
// veth whose link the test takes down and up again; and the tests of a move
// across zones whose link is cut that way mid-copy, or whose orchestrator
// process is killed mid-copy. It is a package of its
// own because its orchestrator listens on the veth's address, which the
// loopback-only checks of pkg/dev/meshtest's tests (that share their
// process and namespace) would rightly refuse.
package partitiontest

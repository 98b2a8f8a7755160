package main

import (
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/netns"
)

// TestMain runs the tests in a network namespace whose only interface is
// loopback: the mesh nodes they start bind on all interfaces (pkg/dev/netns).
func TestMain(m *testing.M) { netns.Main(m) }

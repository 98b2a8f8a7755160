package graph

import "github.com/flexplane/flexplane/pkg/inventory"

// InventoryForTest returns the inventory r reads the estate with.
func InventoryForTest(r *Resolver) *inventory.Inventory { return r.Estate.InventoryForTest() }

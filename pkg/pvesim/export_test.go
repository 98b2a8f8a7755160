package pvesim

// StateSaves is how many times the cluster has written its state file.
func (c *Cluster) StateSaves() int64 {
	if c.persist == nil {
		return 0
	}
	return c.persist.saves.Load()
}

// StateSavePending reports whether a change is waiting for the save loop to take it up.
func (c *Cluster) StateSavePending() bool {
	return c.persist != nil && len(c.persist.kick) > 0
}

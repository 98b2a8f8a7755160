package pvesim

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

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

// VolumeSHA256ForTest is the SHA-256 of the content stored for volid on node ("" when the
// volume is absent or holds no content).
func (c *Cluster) VolumeSHA256ForTest(node, volid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.st.findVolume(node, volid)
	switch {
	case v == nil:
		return ""
	case v.file != "":
		f, err := os.Open(v.file)
		if err != nil {
			return ""
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return ""
		}
		return hex.EncodeToString(h.Sum(nil))
	case v.data == nil:
		return ""
	}
	sum := sha256.Sum256(v.data)
	return hex.EncodeToString(sum[:])
}

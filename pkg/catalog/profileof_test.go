package catalog

import "testing"

func TestProfileOfStorage(t *testing.T) {
	t.Parallel()
	sp := func(name string, read, write int, pools ...ZonePool) *StorageProfile {
		return &StorageProfile{ObjectMeta: ObjectMeta{Name: name}, StorageProfileSpec: StorageProfileSpec{Pools: pools, ReadMBps: read, WriteMBps: write}}
	}
	fast := sp("fast", 500, 500, ZonePool{Zone: "z1", Pool: "ssd"})
	slow := sp("slow", 0, 0, ZonePool{Zone: "z1", Pool: "ssd"}, ZonePool{Zone: "z2", Pool: "hdd"})
	ps := []*StorageProfile{fast, slow}
	for _, c := range []struct {
		zone, storage string
		read, write   int
		want          *StorageProfile
	}{
		{"z1", "ssd", 0, 0, slow},     // the one whose limits match
		{"z1", "ssd", 500, 500, fast}, // likewise
		{"z1", "ssd", 100, 100, fast}, // none matches: the first by name
		{"z2", "hdd", 100, 100, slow}, // the only one
		{"z2", "ssd", 0, 0, nil},      // no profile offers it there
		{"z3", "hdd", 0, 0, (*StorageProfile)(nil)},
	} {
		if got := ProfileOfStorage(ps, c.zone, c.storage, c.read, c.write); got != c.want {
			t.Errorf("%s/%s %d/%d: %v, want %v", c.zone, c.storage, c.read, c.write, got, c.want)
		}
	}
}

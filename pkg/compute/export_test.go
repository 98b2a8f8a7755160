package compute

// DisablePlacementForTest makes the creates of s skip placement: every VM
// is cloned on its template's node, as before placement existed (the
// benchmark's baseline).
func (s *Service) DisablePlacementForTest() { s.d.unplaced = true }

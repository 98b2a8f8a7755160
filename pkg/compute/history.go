package compute

// DefaultHistory is how many operations History reads when the caller
// names no limit.
const DefaultHistory = 20

// HistoryLimit is History's n for the API's first (nil: DefaultHistory);
// a BadInput error on "first" outside 1 to MaxHistory.
func HistoryLimit(first *int) (int, error) {
	if first == nil {
		return DefaultHistory, nil
	}
	if *first < 1 || *first > MaxHistory {
		return 0, badInput("first", "first must be between 1 and %d", MaxHistory)
	}
	return *first, nil
}

package benchmark

import (
	"math"
	"slices"
	"time"
)

// Latencies summarises a set of measured durations.
type Latencies struct {
	// Samples is the number of measurements.
	Samples int `json:"samples"`
	// P50, P99 and Max are in milliseconds (nearest rank).
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Summarize returns the nearest-rank percentiles of ds; the zero value for
// none.
func Summarize(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Latencies{
		Samples: len(s),
		P50:     ms(Percentile(s, 0.50)),
		P99:     ms(Percentile(s, 0.99)),
		Max:     ms(s[len(s)-1]),
	}
}

// Percentile returns the nearest-rank q-quantile (0 < q <= 1) of sorted.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// Ratio is a/b rounded to three decimals (0 when b is 0).
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a / b)
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

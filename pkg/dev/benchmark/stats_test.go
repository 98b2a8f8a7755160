package benchmark

import (
	"os"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(ds)
	want := Latencies{Samples: 100, P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("Summarize = %+v, want %+v", got, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Fatal("Summarize sorted its argument")
	}
	if (Summarize(nil) != Latencies{}) {
		t.Fatal("Summarize(nil) is not zero")
	}
	if one := Summarize([]time.Duration{3 * time.Millisecond}); one.P50 != 3 || one.P99 != 3 {
		t.Fatalf("one sample: %+v", one)
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	if r := Ratio(3, 2); r != 1.5 {
		t.Fatalf("Ratio(3, 2) = %v", r)
	}
	if r := Ratio(1, 0); r != 0 {
		t.Fatalf("Ratio(1, 0) = %v", r)
	}
}

func TestProcessFigures(t *testing.T) {
	t.Parallel()
	m, err := ReadMemory(os.Getpid())
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("ReadMemory = %+v, %v", m, err)
	}
	if _, err := ReadMemory(-1); err == nil {
		t.Fatal("ReadMemory of no process succeeded")
	}
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	after, err := CPUTime(os.Getpid())
	if err != nil || after < before {
		t.Fatalf("CPUTime went from %v to %v (%v)", before, after, err)
	}
	if SelfCPUTime() <= 0 {
		t.Fatal("SelfCPUTime is not positive")
	}
}

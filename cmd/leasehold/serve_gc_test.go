package main

import (
	"runtime/debug"
	"testing"
)

// Not parallel: the GC percent is the process's.
func TestServeTunesTheGCUnlessGOGCIsSet(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	tuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != gcPercentDefault {
		t.Errorf("without GOGC: GC percent %d, want %d", got, gcPercentDefault)
	}
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d changed, want the runtime's own (100 here)", got)
	}
}

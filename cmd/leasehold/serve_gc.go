package main

import "runtime/debug"

// gcPercentDefault is the coordinator's GOGC when the environment sets
// none. Its live heap is small and its garbage is per-job messages and
// batches, so Go's default of 100 collects often; 200 trades a heap up to
// three times the live one for fewer collections, and keeps the memory
// bounds of docs/limits.md with room (400 did not).
const gcPercentDefault = 200

// tuneGC applies gcPercentDefault unless GOGC is set, in which case the Go
// runtime has applied it already. GOMEMLIMIT, when set, still bounds the
// heap as the runtime documents.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentDefault)
	}
}

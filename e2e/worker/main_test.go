package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: every
// worker, stream, handler and coordinator must be gone after cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

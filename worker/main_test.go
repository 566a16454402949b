package worker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: every
// worker, stream and handler must be gone once Run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

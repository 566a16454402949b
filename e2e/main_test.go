package e2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: every
// coordinator, stream and client connection must be gone after cleanup.
//
// Started with floodHelperEnv set, the test binary is instead the flood
// client of TestAbuseCreateFlood (a process of its own, so that its
// goroutines do not starve the probe it is measured by) and exits; with
// attackHelperEnv set, it is the attacker of a pre-authentication abuse
// test (abuse_preauth_test.go).
func TestMain(m *testing.M) {
	if addr := os.Getenv(floodHelperEnv); addr != "" {
		os.Exit(runFloodHelper(addr))
	}
	if attack := os.Getenv(attackHelperEnv); attack != "" {
		os.Exit(runAttackHelper(attack, os.Getenv(attackAddrEnv)))
	}
	goleak.VerifyTestMain(m)
}

//go:build long

package e2e

import (
	"testing"
	"time"
)

// The outbox failure test at ten times the size: 105,000 enqueues, three
// relays, 16 kill rounds (8 of them with the coordinator).
func TestLongOutboxSurvivesKilledRelaysAndCoordinator(t *testing.T) {
	t.Parallel()
	outboxChaos{enqueues: 105_000, txRows: 50, rollbackEvery: 7, kills: 16, killEvery: time.Second, relays: 3}.run(t)
}

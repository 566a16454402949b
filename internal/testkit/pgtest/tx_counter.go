package pgtest

import (
	"testing"

	"github.com/leasehold/leasehold/internal/txcount"
)

// StartTxCounter starts a txcount.Proxy to the server of databaseURL
// (see there for why a test counts commits on the wire rather than with
// pg_stat_database) and stops it when the test ends.
func StartTxCounter(t testing.TB, databaseURL string) *txcount.Proxy {
	t.Helper()
	p, err := txcount.Start(databaseURL)
	if err != nil {
		t.Fatalf("pgtest: start a transaction counter in front of %s: %v", redact(databaseURL), err)
	}
	t.Cleanup(p.Close)
	return p
}

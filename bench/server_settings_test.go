package bench

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

// TestServerSettingsNameWhatMovesTheFigures reads the settings compare
// prints beside its table from a real server.
func TestServerSettingsNameWhatMovesTheFigures(t *testing.T) {
	got, err := serverSettings(t.Context(), pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PostgreSQL 1", "autovacuum o", "fsync o", "synchronous_commit ", "shared_buffers ", "jit o"} {
		if !strings.Contains(got, want) {
			t.Errorf("settings %q lack %q", got, want)
		}
	}
	if l := loadAverage(); len(strings.Fields(l)) != 3 {
		t.Errorf("load average %q", l)
	}
}

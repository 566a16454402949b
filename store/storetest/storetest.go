// Package storetest is the one conformance suite every store engine must
// pass. Each engine's tests call Run with a Harness; any change to store
// semantics extends this suite, never an engine's own tests alone.
//
// The suite drives a store only through the store.Store interface, with
// injected time (every params struct carries an explicit Now, so tests cross
// lease expiry without sleeping), pinned jitter (EngineOptions.Rand) and
// injected faults (EngineOptions.BeforeCommit, EngineOptions.NewID). Races
// are provoked with barriers across two independent stores (Harness.NewShared),
// never with sleeps.
package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/store"
)

// Harness opens stores of one engine for the suite.
type Harness struct {
	// Engine is "postgres" or "sqlite".
	Engine string
	// New opens a fresh, migrated, empty store isolated from every other
	// test (its own database file or PostgreSQL schema) and closes it when
	// the test ends. opts are passed to the engine unchanged.
	New func(t *testing.T, opts store.EngineOptions) store.Store
	// NewShared opens a second, independent store (its own connections) on
	// the same database as s, as a second coordinator would. Used for
	// multi-connection races.
	NewShared func(t *testing.T, s store.Store, opts store.EngineOptions) store.Store
	// Remigrate applies the migrations again to the database behind s; it
	// must be a no-op that returns no error.
	Remigrate func(t *testing.T, s store.Store) error

	// Rows counts, straight from the engine's tables, the rows of one kind
	// that belong to jobID (every row of the kind when jobID is empty). It
	// lets the suite check what the Store interface cannot show: that the
	// checkpoint history is bounded and that retention leaves no orphan
	// rows behind. The field is optional so that a harness written before
	// it still compiles, but the subtests that need it fail, naming it,
	// when it is nil: an unchecked invariant is not a passing one.
	Rows func(t *testing.T, s store.Store, kind RowKind, jobID string) int
}

// RowKind names a family of per-job rows for Harness.Rows.
type RowKind string

// The row kinds Harness.Rows must count.
const (
	RowsJobs        RowKind = "jobs"
	RowsEvents      RowKind = "events"
	RowsAttempts    RowKind = "attempts"
	RowsCheckpoints RowKind = "checkpoints"
	RowsEffects     RowKind = "effects"
	// RowsIdempotency counts idempotency records; with a jobID, those that
	// point at that job.
	RowsIdempotency RowKind = "idempotency"
)

// group is a named set of subtests; each subtest is a sentence.
type group struct {
	name  string
	cases []testCase
}

type testCase struct {
	name string
	run  func(t *testing.T, h Harness)
}

// Run runs the whole conformance suite against h. Every subtest opens its
// own isolated store and runs in parallel with the others.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.NewShared == nil || h.Remigrate == nil {
		t.Fatal("storetest: Harness.New, Harness.NewShared and Harness.Remigrate are required")
	}
	groups := []group{
		acceptanceTests(),
		idempotencyTests(),
		validationTests(),
		claimTests(),
		leaseTests(),
		retryTests(),
		cancelTests(),
		checkpointTests(),
		effectTests(),
		deadLetterTests(),
		queueTests(),
		listTests(),
		tenantTests(),
		terminalTests(),
		retentionTests(),
		concurrencyTests(),
		batchTests(),
		dispatchTests(),
		identityTests(),
		metricsTests(),
		breakerTests(),
		limitTests(),
		scheduleTests(),
		uniqueTests(),
		filterTests(),
		operationTests(),
		historyTests(),
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, h)
				})
			}
		})
	}
}

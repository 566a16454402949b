// Package storetest is the one conformance suite every store engine must
// pass. Each engine's tests call Run with a Harness; any change to store
// semantics extends this suite, never an engine's own tests alone.
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
}

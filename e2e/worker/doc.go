// Package worker holds the end-to-end tests of the Go worker SDK
// (github.com/leasehold/leasehold/worker): workers and clients of the SDK
// against real coordinators (internal/testserver) on real sockets, over
// SQLite and PostgreSQL. They live here rather than beside the SDK so that
// the SDK's own tests need no server internals. The package has no
// non-test code.
package worker

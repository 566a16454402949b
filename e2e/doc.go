// Package e2e holds Leasehold's end-to-end tests: real coordinators on real
// TCP sockets (in-process through internal/testserver, or the real binary
// as a separate process), real SQLite files and real PostgreSQL schemas,
// driven through the generated gRPC clients and, for the README
// walkthrough, grpcurl itself. The package has no non-test code.
package e2e

// Package testkit holds Leasehold's test harnesses, one sub-package each:
// pgtest (a PostgreSQL schema per test), sqlitetest (a SQLite file per
// test), testserver (coordinators on real sockets and in real processes),
// testcert (a CA with server and client certificates), testlog (slog on
// the test's output) and otlptest (an OTLP receiver). Production code never
// imports them.
package testkit

// Command ensuredb creates the PostgreSQL test database when it is missing,
// so that `make test` works on a fresh server without psql or createdb.
//
//	go run ./internal/pgtest/cmd/ensuredb        (make test runs it first)
//
// The database is the one of LEASEHOLD_TEST_DATABASE_URL (default
// pgtest.DefaultURL); it connects to the server's "postgres" database with
// the same credentials to create it. An existing database is left alone.
// It exits 1, saying what to check, when the server cannot be reached.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

func main() {
	if err := run(context.Background(), pgtest.BaseURL()); err != nil {
		fmt.Fprintf(os.Stderr, "ensuredb: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("%s must be a postgres:// URL", pgtest.EnvURL)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return fmt.Errorf("%s names no database", pgtest.EnvURL)
	}
	// Already there (and reachable with these credentials)?
	if conn, err := pgx.Connect(ctx, rawURL); err == nil {
		return conn.Close(ctx)
	} else if !isMissingDatabase(err) {
		return fmt.Errorf("PostgreSQL at %s: %w (is it running? set %s)", u.Redacted(), err, pgtest.EnvURL)
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("connect to %s to create database %q: %w", admin.Redacted(), name, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "ensuredb: created database %q\n", name)
	return nil
}

// isMissingDatabase reports PostgreSQL's invalid_catalog_name (3D000):
// the server answered, the database does not exist.
func isMissingDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "3D000"
}

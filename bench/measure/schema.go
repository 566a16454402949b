package measure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var schemaPrefixPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Schema is a fresh PostgreSQL schema, or a whole database, for one run.
type Schema struct {
	// Name is prefix + 12 random hex digits.
	Name string
	// URL is the base URL with search_path set to the schema, so every
	// connection opened with it works inside the schema only; for a
	// database, the base URL naming it.
	URL string
	// Database says Name is a database (CreateDatabase), not a schema.
	Database bool

	base string
}

// CreateDatabase creates a fresh database on the server at baseURL
// (connected to as baseURL names). Commits are counted per database
// (pg_stat_database), so a run whose figure is the commit rate of an
// otherwise idle system needs a database of its own: on a shared one,
// other sessions' commits would be counted with it.
func CreateDatabase(ctx context.Context, baseURL, prefix string) (*Schema, error) {
	if !schemaPrefixPattern.MatchString(prefix) {
		return nil, fmt.Errorf("database prefix %q must match %s", prefix, schemaPrefixPattern)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("%s is not a postgres:// URL", Redact(baseURL))
	}
	u.Path = "/" + name
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", Redact(baseURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s (the role needs CREATEDB): %w", name, err)
	}
	return &Schema{Name: name, URL: u.String(), Database: true, base: baseURL}, nil
}

// CreateSchema creates a fresh schema on the database at baseURL.
func CreateSchema(ctx context.Context, baseURL, prefix string) (*Schema, error) {
	if !schemaPrefixPattern.MatchString(prefix) {
		return nil, fmt.Errorf("schema prefix %q must match %s", prefix, schemaPrefixPattern)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	u, err := WithParams(baseURL, "search_path", name)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", Redact(baseURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	return &Schema{Name: name, URL: u, base: baseURL}, nil
}

// Drop drops the schema and everything in it (or the database, ending
// any session still connected to it).
func (s *Schema) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if s.Database {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.Name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", s.Name, err)
		}
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+s.Name+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	return nil
}

// WithParams returns rawURL with the query parameters kv (key, value,
// key, value, ...) set.
func WithParams(rawURL string, kv ...string) (string, error) {
	if len(kv)%2 != 0 {
		return "", errors.New("WithParams needs key, value pairs")
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s is not a postgres:// URL", Redact(rawURL))
	}
	q := u.Query()
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Redact hides the password of a URL for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

package outbox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// SchemaVersion is the version of the schema this package installs and
// writes to.
// Version 2 added outbox.unique_key; installing over version 1 upgrades
// it in place.
const SchemaVersion = 2

// SchemaDefault is the PostgreSQL schema the outbox lives in unless told
// otherwise.
const SchemaDefault = "leasehold_outbox"

// PayloadMaxBytesDefault is the largest payload the outbox accepts unless
// told otherwise: the coordinator's default limit
// (coordinator.PayloadMaxBytesDefault, held equal by a test; this package
// does not import the coordinator).
const PayloadMaxBytesDefault = 1 << 20

// runAtSlack is how far beyond store.RunAfterMax the coordinator accepts a
// run_at (coordinator's validator: RunAfterMax + 24h).
const runAtSlackHours = 24

//go:embed schema.sql.tmpl
var schemaTemplate string

var schemaTmpl = template.Must(template.New("schema.sql").Parse(schemaTemplate))

// Options select where the outbox lives and its configurable limit.
type Options struct {
	// Schema is the PostgreSQL schema of the outbox tables. Default
	// SchemaDefault. Lower-case letters, digits and underscores; the
	// outbox owns the schema (Uninstall drops it), so never "public".
	Schema string
	// PayloadMaxBytes bounds a row's payload; set it to the coordinator's
	// --payload-max-bytes when that differs from the default. Default
	// PayloadMaxBytesDefault; at most store.PayloadMaxBytes.
	PayloadMaxBytes int
}

// WithDefaults returns a copy of o with defaults filled in.
func (o Options) WithDefaults() Options {
	if o.Schema == "" {
		o.Schema = SchemaDefault
	}
	if o.PayloadMaxBytes == 0 {
		o.PayloadMaxBytes = PayloadMaxBytesDefault
	}
	return o
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate checks o (after WithDefaults).
func (o Options) Validate() error {
	if err := ValidateSchemaName(o.Schema); err != nil {
		return err
	}
	if o.PayloadMaxBytes < 1 || o.PayloadMaxBytes > store.PayloadMaxBytes {
		return fmt.Errorf("outbox: payload limit must be in [1, %d]", store.PayloadMaxBytes)
	}
	return nil
}

// ValidateSchemaName checks a schema name: it is spliced into SQL, so only
// plain lower-case identifiers are allowed.
func ValidateSchemaName(s string) error {
	if !schemaName.MatchString(s) || s == "public" || strings.HasPrefix(s, "pg_") {
		return fmt.Errorf("outbox: schema %q must be 1-63 characters of [a-z0-9_], not starting with a digit, and not public or pg_*", s)
	}
	return nil
}

// SchemaSQL renders the install script for o: idempotent, safe to run
// again, usable from a migration tool instead of Install.
func SchemaSQL(o Options) (string, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	err := schemaTmpl.Execute(&b, map[string]any{
		"Version":                SchemaVersion,
		"Schema":                 o.Schema,
		"Channel":                o.Schema,
		"NameMaxLen":             store.NameMaxLen,
		"NameMaxLenMinusOne":     store.NameMaxLen - 1,
		"MetadataMaxEntries":     store.MetadataMaxEntries,
		"MetadataKeyMaxLen":      store.MetadataKeyMaxLen,
		"MetadataValueMaxLen":    store.MetadataValueMaxLen,
		"RequestIDMaxLen":        store.RequestIDMaxLen,
		"PayloadMaxBytes":        o.PayloadMaxBytes,
		"PriorityMin":            store.PriorityMin,
		"PriorityMax":            store.PriorityMax,
		"RunAtMaxHours":          int(store.RunAfterMax.Hours()) + runAtSlackHours,
		"MaxAttemptsMax":         store.MaxAttemptsMax,
		"UniqueKeyMaxLen":        store.UniqueKeyMaxLen,
		"UniqueDerivedPrefix":    store.UniqueDerivedPrefix,
		"UniqueDerivedPrefixLen": len(store.UniqueDerivedPrefix),
	})
	if err != nil {
		return "", fmt.Errorf("outbox: render schema: %w", err)
	}
	return b.String(), nil
}

// Channel is the NOTIFY channel of the outbox in schema: every insert
// statement notifies it.
func Channel(schema string) string { return schema }

// Install creates the outbox in the database at conn, or does nothing
// when this schema version is already there. Concurrent installs are
// serialized by an advisory lock.
func Install(ctx context.Context, conn *pgx.Conn, o Options) error {
	o = o.WithDefaults()
	script, err := SchemaSQL(o)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('leasehold_outbox_install:' || $1))`, o.Schema); err != nil {
			return fmt.Errorf("outbox: lock: %w", err)
		}
		v, err := installedVersion(ctx, tx, o.Schema)
		if err != nil {
			return err
		}
		switch {
		case v == SchemaVersion:
			return nil
		case v > SchemaVersion:
			return fmt.Errorf("outbox: schema %s is at version %d, newer than this binary's %d", o.Schema, v, SchemaVersion)
		}
		if _, err := tx.Exec(ctx, script); err != nil {
			return fmt.Errorf("outbox: install into schema %s: %w", o.Schema, err)
		}
		return nil
	})
}

// InstalledVersion returns the outbox version in schema, 0 when none.
func InstalledVersion(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return 0, err
	}
	var v int
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		v, err = installedVersion(ctx, tx, schema)
		return err
	})
	return v, err
}

func installedVersion(ctx context.Context, tx pgx.Tx, schema string) (int, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".schema_version").Scan(&exists); err != nil {
		return 0, fmt.Errorf("outbox: read version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+schema+`.schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("outbox: read version: %w", err)
	}
	return v, nil
}

// ErrNotEmpty is returned by Uninstall when rows wait in the outbox:
// dropping them would lose their jobs.
var ErrNotEmpty = errors.New("outbox: rows are waiting for the relay; uninstalling would lose their jobs (force to drop them anyway)")

// Uninstall drops the outbox schema and everything in it, dead rows
// included. It refuses while rows wait in the outbox unless force is set.
// Uninstalling what is not there does nothing.
func Uninstall(ctx context.Context, conn *pgx.Conn, o Options, force bool) error {
	o = o.WithDefaults()
	if err := ValidateSchemaName(o.Schema); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('leasehold_outbox_install:' || $1))`, o.Schema); err != nil {
			return fmt.Errorf("outbox: lock: %w", err)
		}
		if !force {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, o.Schema+".outbox").Scan(&exists); err != nil {
				return fmt.Errorf("outbox: uninstall: %w", err)
			}
			if exists {
				var waiting bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+o.Schema+`.outbox)`).Scan(&waiting); err != nil {
					return fmt.Errorf("outbox: uninstall: %w", err)
				}
				if waiting {
					return ErrNotEmpty
				}
			}
		}
		if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+o.Schema+` CASCADE`); err != nil {
			return fmt.Errorf("outbox: uninstall schema %s: %w", o.Schema, err)
		}
		return nil
	})
}

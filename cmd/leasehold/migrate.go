package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/sqlite"
)

// runMigrate applies the configured engine's migrations and exits.
func (c *cli) runMigrate(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("leasehold migrate", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var sf storeFlags
	c.addStoreFlags(fs, &sf)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "leasehold migrate: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	var err error
	target := ""
	if sf.databaseURL != "" {
		target = "postgres"
		err = postgres.Migrate(ctx, sf.databaseURL)
	} else {
		target = "sqlite " + sf.sqlitePath
		err = sqlite.Migrate(ctx, sf.sqlitePath)
	}
	if err != nil {
		var inv *store.InvalidError
		if errors.As(err, &inv) {
			fmt.Fprintf(c.stderr, "leasehold migrate: --%s: %s\n", strings.ReplaceAll(inv.Field, "_", "-"), inv.Reason)
			return exitUsage
		}
		fmt.Fprintf(c.stderr, "leasehold migrate: %s: %v\n", target, err)
		return exitFail
	}
	fmt.Fprintf(c.stdout, "migrated %s: schema is up to date\n", target)
	return exitOK
}

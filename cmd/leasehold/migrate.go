package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/sqlite"
)

func (c *cli) migrateCommand() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply database migrations and exit",
		Long:  "Apply the migrations of PostgreSQL when --database-url is set, otherwise of the embedded SQLite file, and exit.",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindFlagEnv(c.getenv, cmd.Flags()); err != nil {
				return err
			}
			return c.runMigrate(cmd.Context(), sf)
		},
	}
	c.addStoreFlags(cmd.Flags(), &sf)
	documentFlagEnv(cmd.Flags())
	return withoutGlobalFlags(cmd)
}

// runMigrate applies the configured engine's migrations.
func (c *cli) runMigrate(ctx context.Context, sf storeFlags) error {
	var err error
	var target string
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
			return usagef("--%s: %s", strings.ReplaceAll(inv.Field, "_", "-"), inv.Reason)
		}
		return fmt.Errorf("%s: %w", target, err)
	}
	fmt.Fprintf(c.stdout, "migrated %s: schema is up to date\n", target)
	return nil
}

package postgres

// Temporary stand-in for helper filter's filterSQL; deleted when that lands.

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/store"
)

func filterSQL(f store.JobFilter, args []any) (string, []any) {
	conds := []string{"true"}
	if len(f.Queues) > 0 {
		args = append(args, f.Queues)
		conds = append(conds, fmt.Sprintf("j.queue = ANY($%d::text[])", len(args)))
	}
	if len(f.States) > 0 {
		st := make([]string, len(f.States))
		for i, s := range f.States {
			st[i] = string(s)
		}
		args = append(args, st)
		conds = append(conds, fmt.Sprintf("j.state = ANY($%d::text[])", len(args)))
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

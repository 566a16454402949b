package sqlite

// Temporary stand-in for helper filter's filterSQL; deleted when that lands.

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/store"
)

func filterSQL(f store.JobFilter, args []any) (string, []any) {
	conds := []string{"1"}
	if len(f.Queues) > 0 {
		ph := make([]string, len(f.Queues))
		for i, q := range f.Queues {
			args = append(args, q)
			ph[i] = fmt.Sprintf("?%d", len(args))
		}
		conds = append(conds, "j.queue IN ("+strings.Join(ph, ",")+")")
	}
	if len(f.States) > 0 {
		ph := make([]string, len(f.States))
		for i, s := range f.States {
			args = append(args, string(s))
			ph[i] = fmt.Sprintf("?%d", len(args))
		}
		conds = append(conds, "j.state IN ("+strings.Join(ph, ",")+")")
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

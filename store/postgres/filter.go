package postgres

import (
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/store"
)

// filterSQL returns a boolean SQL expression over the jobs table aliased `j`
// for f, with its placeholders numbered after the len(args) arguments already
// bound, and args extended with f's values. f must be valid
// (store.JobFilter.Validate); the zero filter is TRUE.
//
// Lists are one text[] argument each (= ANY), metadata one jsonb
// containment (@>, which the GIN index of migration 014 serves), times
// store.FilterTime.
func filterSQL(f store.JobFilter, args []any) (string, []any) {
	var conds []string
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	list := func(col string, vs []string) {
		if len(vs) > 0 {
			conds = append(conds, col+" = ANY("+arg(vs)+"::text[])")
		}
	}
	contains := func(md map[string]string) {
		conds = append(conds, "j.metadata @> "+arg(store.JSONObject(md))+"::jsonb")
	}
	list("j.queue", f.Queues)
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		list("j.state", states)
	}
	list("j.kind", f.Kinds)
	if len(f.Metadata) > 0 {
		contains(f.Metadata)
	}
	if !f.CreatedAfter.IsZero() {
		conds = append(conds, "j.created_at >= "+arg(store.FilterTime(f.CreatedAfter))+"::timestamptz")
	}
	if !f.CreatedBefore.IsZero() {
		conds = append(conds, "j.created_at < "+arg(store.FilterTime(f.CreatedBefore))+"::timestamptz")
	}
	if !f.FinishedAfter.IsZero() {
		conds = append(conds, "j.finished_at >= "+arg(store.FilterTime(f.FinishedAfter))+"::timestamptz")
	}
	if !f.FinishedBefore.IsZero() {
		conds = append(conds, "j.finished_at < "+arg(store.FilterTime(f.FinishedBefore))+"::timestamptz")
	}
	list("j.last_error_code", f.ErrorCodes)
	if f.Dependency != "" {
		conds = append(conds, "j.dependency = "+arg(f.Dependency))
	}
	if f.ConcurrencyKey != "" {
		conds = append(conds, "j.concurrency_key = "+arg(f.ConcurrencyKey))
	}
	if f.Schedule != "" {
		contains(map[string]string{store.ScheduleMetadataKey: f.Schedule})
	}
	list("j.id", f.IDs)
	if len(conds) == 0 {
		return "TRUE", args
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

package sqlite

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/store"
)

// filterSQL returns a boolean SQL expression over the jobs table aliased `j`
// for f, with its placeholders numbered after the len(args) arguments already
// bound, and args extended with f's values. f must be valid
// (store.JobFilter.Validate); the zero filter is 1 (true).
//
// Lists are one JSON array argument each (IN json_each), each metadata
// pair an EXISTS over json_each of the column (any key, however spelled),
// times unix microseconds of store.FilterTime.
func filterSQL(f store.JobFilter, args []any) (string, []any) {
	var conds []string
	arg := func(v any) string {
		args = append(args, v)
		return "?" + strconv.Itoa(len(args))
	}
	list := func(col string, vs []string) {
		if len(vs) == 0 {
			return
		}
		conds = append(conds, col+" IN (SELECT value FROM json_each("+arg(store.JSONStrings(vs))+"))")
	}
	pair := func(k, v string) {
		conds = append(conds, "EXISTS (SELECT 1 FROM json_each(j.metadata) md WHERE md.key = "+arg(k)+
			" AND md.type = 'text' AND md.value = "+arg(v)+")")
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
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		pair(k, f.Metadata[k])
	}
	if !f.CreatedAfter.IsZero() {
		conds = append(conds, "j.created_at >= "+arg(micros(store.FilterTime(f.CreatedAfter))))
	}
	if !f.CreatedBefore.IsZero() {
		conds = append(conds, "j.created_at < "+arg(micros(store.FilterTime(f.CreatedBefore))))
	}
	if !f.FinishedAfter.IsZero() {
		conds = append(conds, "j.finished_at >= "+arg(micros(store.FilterTime(f.FinishedAfter))))
	}
	if !f.FinishedBefore.IsZero() {
		conds = append(conds, "j.finished_at < "+arg(micros(store.FilterTime(f.FinishedBefore))))
	}
	list("j.last_error_code", f.ErrorCodes)
	if f.Dependency != "" {
		conds = append(conds, "j.dependency = "+arg(f.Dependency))
	}
	if f.ConcurrencyKey != "" {
		conds = append(conds, "j.concurrency_key = "+arg(f.ConcurrencyKey))
	}
	if f.Schedule != "" {
		pair(store.ScheduleMetadataKey, f.Schedule)
	}
	list("j.id", f.IDs)
	if len(conds) == 0 {
		return "1", args
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// shownMaxBytes caps a payload, result or checkpoint shown on a page.
const shownMaxBytes = 16 << 10

// shown is bytes made readable: indented JSON, text, or base64 for binary,
// capped at shownMaxBytes.
type shown struct {
	Text      string
	Kind      string // "json", "text", "binary" or "" when empty
	Size      int
	Truncated bool
}

func show(b []byte) shown {
	s := shown{Size: len(b)}
	if len(b) == 0 {
		return s
	}
	var out string
	var ind bytes.Buffer
	switch {
	case json.Valid(b) && json.Indent(&ind, b, "", "  ") == nil:
		s.Kind, out = "json", ind.String()
	case utf8.Valid(b):
		s.Kind, out = "text", string(b)
	default:
		s.Kind, out = "binary", fmt.Sprintf("%x", b)
	}
	if len(out) > shownMaxBytes {
		out = strings.ToValidUTF8(out[:shownMaxBytes], "")
		s.Truncated = true
	}
	s.Text = out
	return s
}

// prettyJSON indents a JSON string (event and audit data), capped.
func prettyJSON(s string) string {
	return show([]byte(s)).Text
}

// enumName is an enum value without its type prefix, in lower case:
// JOB_STATE_DEAD → dead.
func enumName(v fmt.Stringer, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(v.String(), prefix))
}

func jobStateName(s leaseholdv1.JobState) string { return enumName(s, "JOB_STATE_") }
func roleName(r leaseholdv1.Role) string         { return enumName(r, "ROLE_") }

// jobStateNames are the states a job can be filtered by.
func jobStateNames() []string {
	var out []leaseholdv1.JobState
	for v := range leaseholdv1.JobState_name {
		if v != 0 {
			out = append(out, leaseholdv1.JobState(v))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	names := make([]string, len(out))
	for i, s := range out {
		names[i] = jobStateName(s)
	}
	return names
}

func jobStateFromName(n string) (leaseholdv1.JobState, bool) {
	v, ok := leaseholdv1.JobState_value["JOB_STATE_"+strings.ToUpper(n)]
	return leaseholdv1.JobState(v), ok && v != 0
}

func roleNames() []string {
	return []string{"reader", "producer", "worker", "operator", "admin"}
}

func roleFromName(n string) (leaseholdv1.Role, bool) {
	v, ok := leaseholdv1.Role_value["ROLE_"+strings.ToUpper(n)]
	return leaseholdv1.Role(v), ok && v != 0
}

// invalid is the error of a form field the console checks itself (before
// any call), shaped like the API's own.
func invalid(field, msg string) error {
	st := status.New(codes.InvalidArgument, field+": "+msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}}}); err == nil {
		st = d
	}
	return st.Err()
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ts": func(t *timestamppb.Timestamp) string {
		if t == nil {
			return "—"
		}
		return t.AsTime().UTC().Format("2006-01-02 15:04:05Z")
	},
	"lag": func(d *durationpb.Duration) string {
		if d.AsDuration() <= 0 {
			return "0s"
		}
		return d.AsDuration().Round(time.Millisecond).String()
	},
	"dur": func(d *durationpb.Duration) string {
		if d == nil {
			return "—"
		}
		return d.AsDuration().String()
	},
	"state":   jobStateName,
	"role":    roleName,
	"event":   func(t leaseholdv1.EventType) string { return enumName(t, "EVENT_TYPE_") },
	"breaker": func(s leaseholdv1.BreakerState) string { return enumName(s, "BREAKER_STATE_") },
	"breakerEvent": func(t leaseholdv1.BreakerEventType) string {
		return enumName(t, "BREAKER_EVENT_TYPE_")
	},
	"outcome":   func(o leaseholdv1.AttemptOutcome) string { return enumName(o, "ATTEMPT_OUTCOME_") },
	"action":    func(a leaseholdv1.AuditAction) string { return enumName(a, "AUDIT_ACTION_") },
	"run":       func(o leaseholdv1.ScheduleRunOutcome) string { return enumName(o, "SCHEDULE_RUN_OUTCOME_") },
	"pretty":    prettyJSON,
	"bytes":     show,
	"effect":    func(s leaseholdv1.EffectStatus) string { return enumName(s, "EFFECT_STATUS_") },
	"join":      strings.Join,
	"percent":   func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	"since":     since,
	"depth":     func(q *leaseholdv1.QueueStats) int64 { return q.GetQueued() + q.GetLeased() },
	"chart":     throughputChart,
	"labels":    labels,
	"eq":        func(a, b string) bool { return a == b },
	"dict2":     func(v view, id string) rowArgs { return rowArgs{V: v, ID: id} },
	"transport": func(t leaseholdv1.WorkerTransport) string { return enumName(t, "WORKER_TRANSPORT_") },
	"opState":   operationStateName,
	"opKind":    func(k leaseholdv1.OperationKind) string { return enumName(k, "OPERATION_KIND_") },
	"progress":  progress,
	"bulk":      bulkFormArgs,
}

// rowArgs are a row's actions' arguments: the page's view and the row's
// id.
type rowArgs struct {
	V  view
	ID string
}

// since is how long ago t was, roughly.
func since(t *timestamppb.Timestamp) string {
	if t == nil {
		return "—"
	}
	return time.Since(t.AsTime()).Truncate(time.Second).String() + " ago"
}

// labels prints a label map in key order.
func labels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, " ")
}

// parsePages parses each page with the layout; a page may define "live",
// its part that htmx refreshes.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" || base == "partials.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", n)
		if err != nil {
			return nil, err
		}
		pages[base] = t
	}
	return pages, nil
}

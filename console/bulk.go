package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Bulk actions by filter (docs/bulk-operations.md): a POST to bulk/preview
// runs the action's dry run and shows the count and a sample with a
// confirmation form; its POST to bulk/start starts the operation and leads
// to the operation's page. Both are calls of the signed-in principal, so
// the coordinator checks operations.write and re-parses the filter each
// time; the console only carries the filter string between the two steps.

// bulkAction is one bulk action the console offers.
type bulkAction struct {
	// Name is the form's action value.
	Name string
	// Verb labels the confirmation button ("Replay").
	Verb string
	// Title heads the dry-run page.
	Title string
	// Back is the page the action is offered on.
	Back string
	// call runs the action: a dry run, or a real run that starts an
	// operation.
	call func(ctx context.Context, a api, filter, reason string, dry bool) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error)
}

// bulkActions are the actions the jobs and dead-letter pages offer.
var bulkActions = map[string]bulkAction{
	"cancel": {Name: "cancel", Verb: "Cancel", Title: "Cancel matching jobs", Back: "jobs",
		call: func(ctx context.Context, a api, f, reason string, dry bool) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error) {
			out, err := a.ops.CancelJobs(ctx, &leaseholdv1.CancelJobsRequest{Filter: f, DryRun: dry, Reason: reason})
			return out.GetDryRun(), out.GetOperation(), err
		}},
	"retry": {Name: "retry", Verb: "Retry now", Title: "Retry matching jobs now", Back: "jobs",
		call: func(ctx context.Context, a api, f, reason string, dry bool) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error) {
			out, err := a.ops.RetryJobs(ctx, &leaseholdv1.RetryJobsRequest{Filter: f, DryRun: dry, Reason: reason})
			return out.GetDryRun(), out.GetOperation(), err
		}},
	"replay": {Name: "replay", Verb: "Replay", Title: "Replay matching dead jobs", Back: "dead",
		call: func(ctx context.Context, a api, f, reason string, dry bool) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error) {
			out, err := a.ops.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: f, DryRun: dry, Reason: reason})
			return out.GetDryRun(), out.GetOperation(), err
		}},
	"abandon": {Name: "abandon", Verb: "Abandon", Title: "Abandon matching dead jobs", Back: "dead",
		call: func(ctx context.Context, a api, f, reason string, dry bool) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error) {
			out, err := a.ops.AbandonDeadJobs(ctx, &leaseholdv1.AbandonDeadJobsRequest{Filter: f, DryRun: dry, Reason: reason})
			return out.GetDryRun(), out.GetOperation(), err
		}},
}

// bulkForm is what the bulk form of a list page carries: the filter the
// page applies, and the actions offered on it.
type bulkForm struct {
	V                          view
	Queue, Kind, State, Filter string
	Actions                    []bulkAction
}

// bulkFormArgs is the template helper that builds a bulkForm.
func bulkFormArgs(v view, queue, kind, state, filter string, actions ...string) bulkForm {
	f := bulkForm{V: v, Queue: queue, Kind: kind, State: state, Filter: filter}
	for _, a := range actions {
		f.Actions = append(f.Actions, bulkActions[a])
	}
	return f
}

// bulkData is the dry-run page.
type bulkData struct {
	Action bulkAction
	// Filter is the filter the action runs with: the page's fields and
	// filter string ANDed into one string.
	Filter string
	DryRun *leaseholdv1.BulkDryRun
	// Error is the coordinator's refusal of the filter.
	Error string
}

// actionOf is the form's bulk action, or an INVALID_ARGUMENT.
func (req *request) actionOf() (bulkAction, error) {
	a, ok := bulkActions[req.form("action")]
	if !ok {
		return a, invalid("action", "one of cancel, retry, replay, abandon")
	}
	return a, nil
}

// bulkPreview runs the dry run of the filter the page's fields make and
// shows its count and sample, with the form that starts the operation.
func (c *console) bulkPreview(req *request) error {
	a, err := req.actionOf()
	if err != nil {
		return err
	}
	d := bulkData{Action: a, Filter: joinFilter(req.form("queue"), req.form("kind"), req.form("state"), req.form("filter"))}
	if d.Filter == "" {
		d.Error = "Give a queue or a filter first: a bulk action never runs on every job of the tenant."
		c.render(req, http.StatusBadRequest, "bulk.html", a.Title, a.Back, d)
		return nil
	}
	d.DryRun, _, err = a.call(req.ctx, c.api, d.Filter, "", true)
	if status.Code(err) == codes.InvalidArgument {
		d.Error = errorText(err)
		c.render(req, http.StatusBadRequest, "bulk.html", a.Title, a.Back, d)
		return nil
	}
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "bulk.html", a.Title, a.Back, d)
	return nil
}

// bulkStart starts the operation the confirmation form describes; the
// coordinator parses and checks the carried filter again.
func (c *console) bulkStart(req *request) error {
	a, err := req.actionOf()
	if err != nil {
		return err
	}
	filter := req.form("filter")
	if strings.TrimSpace(filter) == "" {
		return invalid("filter", "required: a bulk action never runs on every job of the tenant")
	}
	_, op, err := a.call(req.ctx, c.api, filter, req.form("reason"), false)
	if err != nil {
		return err
	}
	msg := "Started: " + strconv.FormatInt(op.GetCounts().GetMatched(), 10) + " jobs matched"
	// The dry run's count is the form's own echo: shown only as a number.
	if n, err := strconv.ParseInt(req.form("dry_count"), 10, 64); err == nil && n >= 0 {
		msg += " (the dry run counted " + strconv.FormatInt(n, 10) + ")"
	}
	return c.done(req, "operations/"+url.PathEscape(op.GetId()), msg+".")
}

// joinFilter ANDs a page's queue, kind and state fields with its filter
// string into one filter (docs/filters.md). A field the filter string also
// names is refused by the coordinator, as a repeated field.
func joinFilter(queue, kind, state, filter string) string {
	var terms []string
	if q := strings.TrimSpace(queue); q != "" {
		terms = append(terms, "queue = "+quoteFilter(q))
	}
	if k := strings.TrimSpace(kind); k != "" {
		terms = append(terms, "kind = "+quoteFilter(k))
	}
	if st, ok := jobStateFromName(state); ok {
		terms = append(terms, "state = "+strings.TrimPrefix(st.String(), "JOB_STATE_"))
	}
	if f := strings.TrimSpace(filter); f != "" {
		terms = append(terms, f)
	}
	return strings.Join(terms, " AND ")
}

// quoteFilter quotes a value in the filter grammar: a backslash before "
// and \ (control characters are not valid in the names quoted here, and
// the coordinator refuses them).
func quoteFilter(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// operationsData is the operations page.
type operationsData struct {
	State      string
	States     []string
	Operations []*leaseholdv1.Operation
	Next       string
}

func (c *console) operations(req *request) error {
	q := req.r.URL.Query()
	d := operationsData{State: q.Get("state"), States: operationStateNames()}
	in := &leaseholdv1.ListOperationsRequest{PageSize: pageSize, PageToken: q.Get("page")}
	if d.State != "" {
		st, ok := leaseholdv1.OperationState_value["OPERATION_STATE_"+strings.ToUpper(d.State)]
		if !ok || st == 0 {
			return invalid("state", "one of "+strings.Join(d.States, ", "))
		}
		in.State = leaseholdv1.OperationState(st)
	}
	out, err := c.api.ops.ListOperations(req.ctx, in)
	if err != nil {
		return err
	}
	d.Operations, d.Next = out.GetOperations(), out.GetNextPageToken()
	c.render(req, http.StatusOK, "operations.html", "Operations", "operations", d)
	return nil
}

func (c *console) operation(req *request) error {
	id := req.r.PathValue("id")
	out, err := c.api.ops.GetOperation(req.ctx, &leaseholdv1.GetOperationRequest{Name: id})
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "operation.html", "Operation "+id, "operations", out.GetOperation())
	return nil
}

// operationLive is an operation's counts and state alone, which its page
// polls while it runs; once done, the fragment it answers polls no more.
func (c *console) operationLive(req *request) error {
	out, err := c.api.ops.GetOperation(req.ctx, &leaseholdv1.GetOperationRequest{Name: req.r.PathValue("id")})
	if err != nil {
		return err
	}
	c.renderTemplate(req.w, http.StatusOK, "operation.html", "live", view{
		P: c.cfg.Prefix, Can: req.can, CSRF: c.sessions.csrfToken(req.sess.ID), Data: out.GetOperation(),
	})
	return nil
}

func (c *console) cancelOperation(req *request) error {
	id := req.form("id")
	out, err := c.api.ops.CancelOperation(req.ctx, &leaseholdv1.CancelOperationRequest{Name: id})
	if err != nil {
		return err
	}
	msg := "Cancel requested: the operation stops after its current chunk."
	if out.GetOperation().GetDone() {
		msg = "The operation is " + operationStateName(out.GetOperation().GetState()) + "."
	}
	return c.done(req, "operations/"+url.PathEscape(out.GetOperation().GetId()), msg)
}

func operationStateName(s leaseholdv1.OperationState) string {
	return enumName(s, "OPERATION_STATE_")
}

func operationStateNames() []string {
	return []string{"running", "succeeded", "cancelled", "failed"}
}

// progress is the share of an operation's matched jobs handled so far, in
// percent.
func progress(o *leaseholdv1.Operation) int64 {
	n := o.GetCounts().GetMatched()
	if n <= 0 {
		if o.GetDone() {
			return 100
		}
		return 0
	}
	return (n - o.GetCounts().GetRemaining()) * 100 / n
}

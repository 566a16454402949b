package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Request bounds of OperationService.
const (
	// OperationsPageDefault and OperationsPageMax apply to ListOperations.
	OperationsPageDefault = 50
	OperationsPageMax     = 500
	// OperationWaitDefault and OperationWaitMax bound WaitOperation.
	OperationWaitDefault = 30 * time.Second
	OperationWaitMax     = 60 * time.Second
	// DryRunSample is how many matching jobs a dry run shows.
	DryRunSample = 10
	// DryRunCountMax is where a dry run stops counting (capped).
	DryRunCountMax = 1_000_000
	// operationNamePrefix is the AIP-151 name's collection.
	operationNamePrefix = "operations/"
	// operationWaitPoll is how often WaitOperation reads the operation.
	operationWaitPoll = 200 * time.Millisecond
)

// operationService is the bulk API: a thin shell that validates once,
// applies the caller's queue scope, calls the store and encodes.
type operationService struct {
	leaseholdv1.UnimplementedOperationServiceServer
	c *Coordinator
}

var operationKinds = map[store.OperationKind]leaseholdv1.OperationKind{
	store.OperationCancel:      leaseholdv1.OperationKind_OPERATION_KIND_CANCEL,
	store.OperationRetry:       leaseholdv1.OperationKind_OPERATION_KIND_RETRY,
	store.OperationReplay:      leaseholdv1.OperationKind_OPERATION_KIND_REPLAY,
	store.OperationAbandon:     leaseholdv1.OperationKind_OPERATION_KIND_ABANDON,
	store.OperationDelete:      leaseholdv1.OperationKind_OPERATION_KIND_DELETE,
	store.OperationSetPriority: leaseholdv1.OperationKind_OPERATION_KIND_SET_PRIORITY,
}

var operationStates = map[store.OperationState]leaseholdv1.OperationState{
	store.OperationRunning:   leaseholdv1.OperationState_OPERATION_STATE_RUNNING,
	store.OperationSucceeded: leaseholdv1.OperationState_OPERATION_STATE_SUCCEEDED,
	store.OperationCancelled: leaseholdv1.OperationState_OPERATION_STATE_CANCELLED,
	store.OperationFailed:    leaseholdv1.OperationState_OPERATION_STATE_FAILED,
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toOperation(o *store.Operation) *leaseholdv1.Operation {
	return &leaseholdv1.Operation{
		Name: operationNamePrefix + o.ID, Id: o.ID, Kind: operationKinds[o.Kind], State: operationStates[o.State],
		Done: o.Done(), Filter: o.Filter, Reason: o.Reason, Priority: o.Priority, Actor: o.Actor, ActorName: o.ActorName,
		QueueScope: o.QueueScope, CreateTime: tsOrNil(o.CreatedAt), FinishTime: tsOrNil(o.FinishedAt),
		UpdateTime: tsOrNil(o.UpdatedAt), Error: o.Error, CancelRequested: o.CancelRequested,
		Counts: &leaseholdv1.OperationCounts{
			Matched: o.Counts.Matched, Acted: o.Counts.Acted, SkippedChanged: o.Counts.SkippedChanged,
			SkippedOutOfScope: o.Counts.SkippedOutOfScope, Failed: o.Counts.Failed, Remaining: o.Counts.Remaining(),
		},
	}
}

// bulkRequest is what every bulk call carries.
type bulkRequest struct {
	kind     store.OperationKind
	filter   string
	dryRun   bool
	reason   string
	priority int32
}

// parseOperationFilter validates a bulk call's filter once: it parses,
// is not empty, names no queue outside the caller's scope, and names
// states the kind acts on.
func parseOperationFilter(ctx context.Context, kind store.OperationKind, text string) (store.JobFilter, error) {
	f, err := store.ParseJobFilter(text)
	if err != nil {
		var fe *store.FilterError
		if errors.As(err, &fe) {
			return f, filterViolation(fe)
		}
		return f, err
	}
	if f.IsZero() {
		return f, invalidArgument("filter", "is required: an empty filter would act on every job of the tenant")
	}
	if err := checkQueues(ctx, "filter.queue", f.Queues); err != nil {
		return f, err
	}
	f, err = store.OperationFilter(kind, f)
	var fe *store.FilterError
	if errors.As(err, &fe) {
		return f, filterViolation(fe)
	}
	return f, err
}

// filterViolation is a bad filter as INVALID_ARGUMENT with the field
// violation "filter" or "filter.<field>".
func filterViolation(fe *store.FilterError) error {
	field := "filter"
	if fe.Field != "" {
		field += "." + fe.Field
	}
	return invalidArgument(field, fe.Description)
}

// bulk validates and runs one bulk call: the dry run's count and sample,
// or the started operation.
func (s *operationService) bulk(ctx context.Context, req bulkRequest) (*leaseholdv1.BulkDryRun, *leaseholdv1.Operation, error) {
	c := s.c
	if err := store.ValidateReason(req.reason); err != nil {
		return nil, nil, toStatus(ctx, c.log, err)
	}
	if req.priority > store.OperationPriorityMax || req.priority < -store.OperationPriorityMax {
		return nil, nil, invalidArgument("priority", "must be between -1000000 and 1000000")
	}
	f, err := parseOperationFilter(ctx, req.kind, req.filter)
	if err != nil {
		return nil, nil, toStatus(ctx, c.log, err)
	}
	cl := callerFrom(ctx)
	if req.dryRun {
		dry, err := c.dryRun(ctx, f)
		return dry, nil, err
	}
	op, err := c.store.StartOperation(ctx, store.StartOperationParams{
		Tenant: cl.tenant, Kind: req.kind, Filter: f, FilterText: req.filter, Reason: req.reason, Priority: req.priority,
		Actor: cl.identity, ActorName: cl.name, QueueScope: cl.queues, Limit: c.cfg.OperationsPerTenantMax, Now: c.now(),
	})
	if err != nil {
		return nil, nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditOperationStarted, op.ID, operationAuditData(op))
	if c.maintenance.operations != nil {
		c.maintenance.operations.Wake()
	}
	return nil, toOperation(op), nil
}

// operationAuditData is what an operation's audit events record of it.
func operationAuditData(op *store.Operation) map[string]any {
	d := map[string]any{"kind": string(op.Kind), "filter": op.Filter, "matched": op.Counts.Matched}
	if op.Reason != "" {
		d["reason"] = op.Reason
	}
	if op.Done() {
		d["acted"], d["skipped_changed"], d["skipped_out_of_scope"], d["failed"] =
			op.Counts.Acted, op.Counts.SkippedChanged, op.Counts.SkippedOutOfScope, op.Counts.Failed
	}
	if op.Error != "" {
		d["error"] = op.Error
	}
	return d
}

// operationChunked records a committed chunk's metrics.
func (c *Coordinator) operationChunked(ctx context.Context, res store.ChunkResult, took time.Duration) {
	rate := 0.0
	if took > 0 {
		rate = float64(res.Handled) / took.Seconds()
	}
	c.core.metrics.operationChunk(ctx, res.Operation.Tenant, string(res.Operation.Kind), res.Rows, rate)
	for _, q := range res.Queues {
		c.core.dispatcher.Wake(q.Tenant, q.Queue)
	}
}

// operationFinished records an operation this coordinator finished in its
// tenant's audit log, as done by the principal that started it.
func (c *Coordinator) operationFinished(ctx context.Context, op *store.Operation) {
	var action store.AuditAction
	switch op.State {
	case store.OperationCancelled:
		action = store.AuditOperationCancelled
	case store.OperationFailed:
		action = store.AuditOperationFailed
	case store.OperationSucceeded, store.OperationRunning:
		action = store.AuditOperationFinished
	}
	raw, err := json.Marshal(operationAuditData(op))
	if err != nil {
		raw = []byte("{}")
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if _, err := c.store.AppendAudit(actx, store.AppendAuditParams{
		Tenant: op.Tenant, Actor: op.Actor, ActorName: op.ActorName, Action: action, Target: op.ID,
		Data: string(raw), Now: c.now(),
	}); err != nil {
		c.log.ErrorContext(ctx, "audit event not recorded", slog.String("action", string(action)),
			slog.String("target", op.ID), slog.String("error", err.Error()))
	}
}

func (s *operationService) CancelJobs(ctx context.Context, req *leaseholdv1.CancelJobsRequest) (*leaseholdv1.CancelJobsResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationCancel, filter: req.GetFilter(), dryRun: req.GetDryRun(), reason: req.GetReason()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.CancelJobsResponse{DryRun: dry, Operation: op}, nil
}

func (s *operationService) RetryJobs(ctx context.Context, req *leaseholdv1.RetryJobsRequest) (*leaseholdv1.RetryJobsResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationRetry, filter: req.GetFilter(), dryRun: req.GetDryRun(), reason: req.GetReason()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.RetryJobsResponse{DryRun: dry, Operation: op}, nil
}

func (s *operationService) ReplayDeadJobs(ctx context.Context, req *leaseholdv1.ReplayDeadJobsRequest) (*leaseholdv1.ReplayDeadJobsResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationReplay, filter: req.GetFilter(), dryRun: req.GetDryRun(), reason: req.GetReason()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.ReplayDeadJobsResponse{DryRun: dry, Operation: op}, nil
}

func (s *operationService) AbandonDeadJobs(ctx context.Context, req *leaseholdv1.AbandonDeadJobsRequest) (*leaseholdv1.AbandonDeadJobsResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationAbandon, filter: req.GetFilter(), dryRun: req.GetDryRun(), reason: req.GetReason()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.AbandonDeadJobsResponse{DryRun: dry, Operation: op}, nil
}

func (s *operationService) DeleteJobs(ctx context.Context, req *leaseholdv1.DeleteJobsRequest) (*leaseholdv1.DeleteJobsResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationDelete, filter: req.GetFilter(), dryRun: req.GetDryRun(), reason: req.GetReason()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.DeleteJobsResponse{DryRun: dry, Operation: op}, nil
}

func (s *operationService) SetJobsPriority(ctx context.Context, req *leaseholdv1.SetJobsPriorityRequest) (*leaseholdv1.SetJobsPriorityResponse, error) {
	dry, op, err := s.bulk(ctx, bulkRequest{kind: store.OperationSetPriority, filter: req.GetFilter(), dryRun: req.GetDryRun(),
		reason: req.GetReason(), priority: req.GetPriority()})
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.SetJobsPriorityResponse{DryRun: dry, Operation: op}, nil
}

// operationID reads "operations/{id}" or a bare id.
func operationID(name string) (string, error) {
	id := strings.TrimPrefix(name, operationNamePrefix)
	if err := store.ValidateText("name", id, store.NameMaxLen, true); err != nil {
		return "", err
	}
	return id, nil
}

func (c *Coordinator) getOperation(ctx context.Context, name string) (*store.Operation, error) {
	id, err := operationID(name)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	op, err := c.store.GetOperation(ctx, tenantFrom(ctx), id)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return op, nil
}

func (s *operationService) GetOperation(ctx context.Context, req *leaseholdv1.GetOperationRequest) (*leaseholdv1.GetOperationResponse, error) {
	op, err := s.c.getOperation(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.GetOperationResponse{Operation: toOperation(op)}, nil
}

func (s *operationService) ListOperations(ctx context.Context, req *leaseholdv1.ListOperationsRequest) (*leaseholdv1.ListOperationsResponse, error) {
	c := s.c
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalidArgument("page_size", "must not be negative")
	case size == 0:
		size = OperationsPageDefault
	}
	size = min(size, OperationsPageMax)
	var state store.OperationState
	if st := req.GetState(); st != leaseholdv1.OperationState_OPERATION_STATE_UNSPECIFIED {
		for k, v := range operationStates {
			if v == st {
				state = k
			}
		}
		if state == "" {
			return nil, invalidArgument("state", "must be an OperationState")
		}
	}
	page, err := c.store.ListOperations(ctx, store.ListOperationsParams{Tenant: tenantFrom(ctx), State: state, Limit: size, Cursor: req.GetPageToken()})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := &leaseholdv1.ListOperationsResponse{NextPageToken: page.NextCursor}
	for _, op := range page.Operations {
		out.Operations = append(out.Operations, toOperation(op))
	}
	return out, nil
}

func (s *operationService) CancelOperation(ctx context.Context, req *leaseholdv1.CancelOperationRequest) (*leaseholdv1.CancelOperationResponse, error) {
	c := s.c
	id, err := operationID(req.GetName())
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	op, err := c.store.CancelOperation(ctx, tenantFrom(ctx), id, c.now())
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if op.State == store.OperationRunning {
		c.audit(ctx, store.AuditOperationCancelled, op.ID, operationAuditData(op))
	}
	return &leaseholdv1.CancelOperationResponse{Operation: toOperation(op)}, nil
}

func (s *operationService) WaitOperation(ctx context.Context, req *leaseholdv1.WaitOperationRequest) (*leaseholdv1.WaitOperationResponse, error) {
	c := s.c
	wait := OperationWaitDefault
	if d := req.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, invalidArgument("timeout", "must be a non-negative duration")
		}
		if d.AsDuration() > 0 {
			wait = min(d.AsDuration(), OperationWaitMax)
		}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(operationWaitPoll)
	defer tick.Stop()
	for {
		op, err := c.getOperation(ctx, req.GetName())
		if err != nil {
			return nil, err
		}
		if op.Done() {
			return &leaseholdv1.WaitOperationResponse{Operation: toOperation(op)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, toStatus(ctx, c.log, ctx.Err())
		case <-c.life.closing:
			return &leaseholdv1.WaitOperationResponse{Operation: toOperation(op)}, nil
		case <-deadline.C:
			return &leaseholdv1.WaitOperationResponse{Operation: toOperation(op)}, nil
		case <-tick.C:
		}
	}
}

// dryRun counts the jobs f matches (store.CountJobs, up to DryRunCountMax)
// with a sample. For a scoped caller the sample leaves out jobs outside
// its queues; the count includes them (a run would count them
// skipped_out_of_scope).
func (c *Coordinator) dryRun(ctx context.Context, f store.JobFilter) (*leaseholdv1.BulkDryRun, error) {
	n, err := c.store.CountJobs(ctx, store.CountJobsParams{Tenant: tenantFrom(ctx), Filter: f, SampleSize: DryRunSample, Limit: DryRunCountMax})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := &leaseholdv1.BulkDryRun{Count: n.Count, Capped: n.Capped}
	for _, j := range n.Sample {
		if inScope(ctx, j.Queue) {
			out.Sample = append(out.Sample, toJob(j))
		}
	}
	return out, nil
}

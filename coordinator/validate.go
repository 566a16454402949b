package coordinator

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Request bounds of the API that the store does not define itself.
const (
	// PageSizeDefault and PageSizeMax apply to ListJobs and ListDeadJobs
	// (AIP-158: 0 → default, larger → capped, negative → invalid).
	PageSizeDefault = 50
	PageSizeMax     = 500
	// EventPageSizeDefault and EventPageSizeMax apply to ListJobEvents.
	EventPageSizeDefault = 100
	EventPageSizeMax     = 1000
	// PageTokenMaxLen bounds an opaque page token.
	PageTokenMaxLen = 1024
	// CreditsMax bounds one CreditGrant and the credits a stream may hold
	// at once; Hello.capacity has the same range.
	CreditsMax = 10_000
	// LabelsMax bounds Hello.labels.
	LabelsMax = 32
	// SDKFieldMaxLen bounds Hello.sdk_name and Hello.sdk_version.
	SDKFieldMaxLen = 128
)

// validator decodes requests: one method per request message, each
// returning the store parameters or a *store.InvalidError naming the
// offending field by its proto path. It checks what only the API knows —
// required messages, well-formed durations and timestamps, the configured
// payload limit, page sizes and tokens — and leaves the bounds of the
// values to the store, which checks every request it gets once, before any
// SQL, with errors named by the same proto paths. (Claims are the
// exception: they wait in the dispatcher, so the API checks them with the
// store's own rule before they join a round.) Nothing is written before a
// request has passed both.
type validator struct {
	payloadMax   int
	defaultLease time.Duration
	// pageBytes is the byte budget of a list page (Config.ListPageBytes).
	pageBytes int
	// leases checks each token's secret.
	leases leaseSigner
}

func (v validator) blob(field string, b []byte) error {
	if len(b) > v.payloadMax {
		return store.Invalid(field, fmt.Sprintf("must be at most %d bytes", v.payloadMax))
	}
	return nil
}

// duration decodes an optional duration: nil is zero; a malformed or
// negative one is invalid.
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, store.Invalid(field, "must be a valid duration")
	}
	if d.AsDuration() < 0 {
		return 0, store.Invalid(field, "must not be negative")
	}
	return d.AsDuration(), nil
}

func timestamp(field string, t *timestamppb.Timestamp) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if err := t.CheckValid(); err != nil {
		return time.Time{}, store.Invalid(field, "must be a valid timestamp")
	}
	return t.AsTime(), nil
}

// jobID checks a job id. Every job id is a UUID (store.NewID makes
// UUIDv7 strings), so anything else names no job: INVALID_ARGUMENT, not
// NOT_FOUND, tells the caller the mistake is in the request.
func jobID(field, id string) error {
	if err := store.ValidateText(field, id, store.NameMaxLen, true); err != nil {
		return err
	}
	if err := uuid.Validate(id); err != nil || len(id) != uuidLen {
		return store.Invalid(field, "must be a job id (a UUID such as 0191d9c8-3f1e-7a2b-9c4d-5e6f7a8b9c0d)")
	}
	return nil
}

// uuidLen is the length of a UUID in its canonical form, the only form
// store.NewID writes (uuid.Validate also accepts braced and urn: forms).
const uuidLen = 36

// pageSize applies AIP-158: 0 → def, above max → max, negative → invalid.
func pageSize(field string, n int32, def, maxSize int) (int, error) {
	switch {
	case n < 0:
		return 0, store.Invalid(field, "must not be negative")
	case n == 0:
		return def, nil
	case int(n) > maxSize:
		return maxSize, nil
	}
	return int(n), nil
}

// jobView decodes a list's view (AIP-157): unset is BASIC.
func jobView(field string, v leaseholdv1.JobView) (store.JobView, error) {
	switch v {
	case leaseholdv1.JobView_JOB_VIEW_UNSPECIFIED, leaseholdv1.JobView_JOB_VIEW_BASIC:
		return store.JobViewBasic, nil
	case leaseholdv1.JobView_JOB_VIEW_FULL:
		return store.JobViewFull, nil
	}
	return 0, store.Invalid(field, "must be JOB_VIEW_BASIC or JOB_VIEW_FULL")
}

func pageToken(field, tok string) error {
	return store.ValidateText(field, tok, PageTokenMaxLen, false)
}

// renameField rewrites the prefix of an *store.InvalidError's field, so a
// store validator's "token.job_id" reads "tokens[3].job_id" to the caller.
func renameField(err error, from, to string) error {
	var inv *store.InvalidError
	if errors.As(err, &inv) && strings.HasPrefix(inv.Field, from) {
		return store.Invalid(to+strings.TrimPrefix(inv.Field, from), inv.Reason)
	}
	return err
}

func optionalName(field, s string) error {
	if s != "" && !store.ValidName(s) {
		return store.Invalid(field, "must be 1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit")
	}
	return nil
}

func requiredName(field, s string) error {
	if !store.ValidName(s) {
		return store.Invalid(field, "must be 1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit")
	}
	return nil
}

// token decodes a lease token and checks its secret; field names the token
// in the request. The secret is checked first, before any other field of
// the request (AIP-211: authorization before validation), since without it
// the caller has no business with the lease. The token's other values are
// the store's to check.
func (v validator) token(field string, t *leaseholdv1.LeaseToken) (store.LeaseToken, error) {
	tok, err := decodeToken(field, t)
	if err != nil {
		return store.LeaseToken{}, err
	}
	if !v.leases.verify(tok, t.GetSecret()) {
		return store.LeaseToken{}, errLeaseSecret
	}
	return tok, nil
}

// decodeToken decodes a token that must carry a secret, without checking
// it.
func decodeToken(field string, t *leaseholdv1.LeaseToken) (store.LeaseToken, error) {
	if t == nil {
		return store.LeaseToken{}, store.Invalid(field, "is required")
	}
	if len(t.GetSecret()) == 0 {
		return store.LeaseToken{}, store.Invalid(field+".secret", "is required: send the token as the lease gave it")
	}
	// The shape of the id is checked before the secret: a malformed id
	// is a caller's mistake (INVALID_ARGUMENT naming the field) whatever
	// the secret, and saying so reveals nothing about any lease.
	if err := jobID(field+".job_id", t.GetJobId()); err != nil {
		return store.LeaseToken{}, err
	}
	return store.LeaseToken{JobID: t.GetJobId(), Generation: t.GetLeaseGeneration(), WorkerID: t.GetWorkerId()}, nil
}

func (v validator) spec(field string, s *leaseholdv1.JobSpec) (store.JobSpec, error) {
	if s == nil {
		return store.JobSpec{}, store.Invalid(field, "is required")
	}
	runAt, err := timestamp(field+".run_at", s.GetRunAt())
	if err != nil {
		return store.JobSpec{}, err
	}
	runAfter, err := duration(field+".run_after", s.GetRunAfter())
	if err != nil {
		return store.JobSpec{}, err
	}
	spec := store.JobSpec{
		Queue:          s.GetQueue(),
		Kind:           s.GetKind(),
		Payload:        s.GetPayload(),
		Metadata:       s.GetMetadata(),
		Priority:       s.GetPriority(),
		RunAt:          runAt,
		RunAfter:       runAfter,
		MaxAttempts:    s.GetMaxAttempts(),
		Dependency:     s.GetDependency(),
		ConcurrencyKey: s.GetConcurrencyKey(),
	}
	if err := v.blob(field+".payload", spec.Payload); err != nil {
		return store.JobSpec{}, err
	}
	if !runAt.IsZero() && (runAt.Year() < 1970 || runAt.After(time.Now().Add(store.RunAfterMax+24*time.Hour))) {
		// Bounded like run_after; measured on the process clock because
		// this is a sanity bound, not a lease decision.
		return store.JobSpec{}, store.Invalid(field+".run_at", "must be after 1970 and at most 365 days ahead")
	}
	return spec, nil
}

func (v validator) createRequest(field string, r *leaseholdv1.CreateJobRequest) (store.CreateRequest, error) {
	if r == nil {
		return store.CreateRequest{}, store.Invalid(field, "is required")
	}
	prefix := field
	if prefix != "" {
		prefix += "."
	}
	spec, err := v.spec(prefix+"job", r.GetJob())
	if err != nil {
		return store.CreateRequest{}, err
	}
	unique, err := uniqueOptions(prefix+"unique", r.GetUnique())
	if err != nil {
		return store.CreateRequest{}, err
	}
	return store.CreateRequest{Spec: spec, RequestID: r.GetRequestId(), Unique: unique}, nil
}

// uniqueOptions decodes a request's unique options (nil: not unique);
// the store checks their bounds (store.ValidateUnique), once.
func uniqueOptions(field string, u *leaseholdv1.UniqueOptions) (*store.UniqueOptions, error) {
	if u == nil {
		return nil, nil
	}
	period, err := duration(field+".period", u.GetPeriod())
	if err != nil {
		return nil, err
	}
	out := &store.UniqueOptions{Key: u.GetKey(), ByMetadataKeys: u.GetByMetadataKeys(), Period: period}
	switch u.GetOnConflict() {
	case leaseholdv1.UniqueOptions_ON_CONFLICT_UNSPECIFIED, leaseholdv1.UniqueOptions_ON_CONFLICT_RETURN_EXISTING:
		out.OnConflict = store.UniqueReturnExisting
	case leaseholdv1.UniqueOptions_ON_CONFLICT_FAIL:
		out.OnConflict = store.UniqueFail
	default:
		return nil, store.Invalid(field+".on_conflict", "must be RETURN_EXISTING or FAIL")
	}
	return out, nil
}

// CreateJob validates a CreateJobRequest.
func (v validator) CreateJob(r *leaseholdv1.CreateJobRequest) (store.CreateRequest, error) {
	return v.createRequest("", r)
}

// BatchCreateJobs validates a BatchCreateJobsRequest.
func (v validator) BatchCreateJobs(r *leaseholdv1.BatchCreateJobsRequest) ([]store.CreateRequest, error) {
	n := len(r.GetRequests())
	if n == 0 || n > store.BatchMaxItems {
		return nil, store.Invalid("requests", fmt.Sprintf("must have 1-%d items", store.BatchMaxItems))
	}
	out := make([]store.CreateRequest, 0, n)
	for i, item := range r.GetRequests() {
		cr, err := v.createRequest(fmt.Sprintf("requests[%d]", i), item)
		if err != nil {
			return nil, err
		}
		out = append(out, cr)
	}
	return out, nil
}

// GetJob validates a GetJobRequest.
func (v validator) GetJob(r *leaseholdv1.GetJobRequest) (string, error) {
	return r.GetJobId(), jobID("job_id", r.GetJobId())
}

// ListJobCheckpoints validates a ListJobCheckpointsRequest.
func (v validator) ListJobCheckpoints(r *leaseholdv1.ListJobCheckpointsRequest) (string, error) {
	return r.GetJobId(), jobID("job_id", r.GetJobId())
}

// ListJobEffects validates a ListJobEffectsRequest.
func (v validator) ListJobEffects(r *leaseholdv1.ListJobEffectsRequest) (string, error) {
	return r.GetJobId(), jobID("job_id", r.GetJobId())
}

// ListJobs validates a ListJobsRequest. A JOB_STATE_UNSPECIFIED filter
// matches every state, as the proto documents.
func (v validator) ListJobs(r *leaseholdv1.ListJobsRequest) (store.ListJobsParams, error) {
	var p store.ListJobsParams
	if err := optionalName("queue", r.GetQueue()); err != nil {
		return p, err
	}
	if err := optionalName("kind", r.GetKind()); err != nil {
		return p, err
	}
	if len(r.GetStates()) > 16 {
		return p, store.Invalid("states", "must have at most 16 items")
	}
	var states []store.JobState
	for i, s := range r.GetStates() {
		if s == leaseholdv1.JobState_JOB_STATE_UNSPECIFIED {
			states = nil
			break
		}
		st, ok := jobStateFromProto(s)
		if !ok {
			return p, store.Invalid(fmt.Sprintf("states[%d]", i), "must be a known JobState")
		}
		states = append(states, st)
	}
	size, err := pageSize("page_size", r.GetPageSize(), PageSizeDefault, PageSizeMax)
	if err != nil {
		return p, err
	}
	if err := pageToken("page_token", r.GetPageToken()); err != nil {
		return p, err
	}
	view, err := jobView("view", r.GetView())
	if err != nil {
		return p, err
	}
	filter, err := store.ParseJobFilter(r.GetFilter())
	if err != nil {
		return p, err
	}
	return store.ListJobsParams{Queue: r.GetQueue(), Kind: r.GetKind(), States: states, Limit: size, Cursor: r.GetPageToken(),
		View: view, MaxBytes: v.pageBytes, Filter: filter}, nil
}

// CancelJob validates a CancelJobRequest.
func (v validator) CancelJob(r *leaseholdv1.CancelJobRequest) (store.RequestCancelParams, error) {
	return store.RequestCancelParams{JobID: r.GetJobId(), Reason: r.GetReason()}, jobID("job_id", r.GetJobId())
}

// ListJobEvents validates a ListJobEventsRequest.
func (v validator) ListJobEvents(r *leaseholdv1.ListJobEventsRequest) (store.ListEventsParams, error) {
	if err := jobID("job_id", r.GetJobId()); err != nil {
		return store.ListEventsParams{}, err
	}
	if r.GetAfterSequence() < 0 {
		return store.ListEventsParams{}, store.Invalid("after_sequence", "must not be negative")
	}
	size, err := pageSize("page_size", r.GetPageSize(), EventPageSizeDefault, EventPageSizeMax)
	if err != nil {
		return store.ListEventsParams{}, err
	}
	return store.ListEventsParams{JobID: r.GetJobId(), AfterSequence: r.GetAfterSequence(), Limit: size}, nil
}

// WatchJob validates a WatchJobRequest.
func (v validator) WatchJob(r *leaseholdv1.WatchJobRequest) (store.ListEventsParams, error) {
	if err := jobID("job_id", r.GetJobId()); err != nil {
		return store.ListEventsParams{}, err
	}
	if r.GetAfterSequence() < 0 {
		return store.ListEventsParams{}, store.Invalid("after_sequence", "must not be negative")
	}
	return store.ListEventsParams{JobID: r.GetJobId(), AfterSequence: r.GetAfterSequence(), Limit: EventPageSizeMax}, nil
}

// claimRequest is a validated ClaimRequest.
type claimRequest struct {
	params store.ClaimParams
	wait   time.Duration
}

// Claim validates a ClaimRequest. max_jobs 0 means 1.
func (v validator) Claim(r *leaseholdv1.ClaimRequest) (claimRequest, error) {
	lease, err := v.leaseDuration("lease_duration", r.GetLeaseDuration(), 0)
	if err != nil {
		return claimRequest{}, err
	}
	wait, err := duration("wait", r.GetWait())
	if err != nil {
		return claimRequest{}, err
	}
	if wait > ClaimWaitMax {
		return claimRequest{}, store.Invalid("wait", "must be at most 60s")
	}
	maxJobs := int(r.GetMaxJobs())
	if maxJobs == 0 {
		maxJobs = 1
	}
	p := store.ClaimParams{Worker: r.GetWorkerId(), Queues: r.GetQueues(), Max: maxJobs, LeaseDuration: lease}
	if err := store.ValidateClaim(p); err != nil {
		return claimRequest{}, err
	}
	return claimRequest{params: p, wait: wait}, nil
}

// tokens validates a list of tokens that must all belong to one worker.
func (v validator) tokens(field string, in []*leaseholdv1.LeaseToken, worker string) ([]store.LeaseToken, error) {
	if len(in) > store.BatchMaxItems {
		return nil, store.Invalid(field, fmt.Sprintf("must have at most %d items", store.BatchMaxItems))
	}
	out := make([]store.LeaseToken, 0, len(in))
	for i, t := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		tok, err := decodeToken(f, t)
		if err != nil {
			return nil, err
		}
		if worker == "" {
			worker = tok.WorkerID
		}
		if tok.WorkerID != worker {
			return nil, store.Invalid(f+".worker_id", "all tokens must belong to the same worker")
		}
		out = append(out, tok)
	}
	for i, tok := range out {
		if !v.leases.verify(tok, in[i].GetSecret()) {
			return nil, errLeaseSecret
		}
	}
	return out, nil
}

// Renew validates a RenewRequest; an unset lease_duration is the
// configured default.
func (v validator) Renew(r *leaseholdv1.RenewRequest) (store.RenewParams, error) {
	if len(r.GetTokens()) == 0 {
		return store.RenewParams{}, store.Invalid("tokens", fmt.Sprintf("must have 1-%d items", store.BatchMaxItems))
	}
	toks, err := v.tokens("tokens", r.GetTokens(), "")
	if err != nil {
		return store.RenewParams{}, err
	}
	lease, err := v.leaseDuration("lease_duration", r.GetLeaseDuration(), v.defaultLease)
	if err != nil {
		return store.RenewParams{}, err
	}
	return store.RenewParams{Tokens: toks, LeaseDuration: lease}, nil
}

// leaseDuration decodes an optional lease duration within [1s, 1h]:
// unset is def, and a set duration must be in range, zero included (the
// proto's range is [1s, 1h]; "0s" is a mistake, not a way to say unset).
func (v validator) leaseDuration(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	lease, err := duration(field, d)
	if err != nil {
		return 0, err
	}
	return lease, store.ValidateLeaseDuration(field, lease, false)
}

// Report decodes one of the four terminal report requests (Complete,
// Retry, Cancel, Release), unary or sent on a stream, straight into a
// store.Report, and returns its kind and token as sent (to answer with).
// The tenant and the clock are the caller's to set.
func (v validator) Report(m proto.Message) (leaseholdv1.ReportKind, *leaseholdv1.LeaseToken, store.Report, error) {
	var (
		kind leaseholdv1.ReportKind
		tok  *leaseholdv1.LeaseToken
		rep  store.Report
		err  error
	)
	switch r := m.(type) {
	case *leaseholdv1.CompleteRequest:
		kind, tok, rep.Kind, rep.Result = leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, r.GetToken(), store.ReportComplete, r.GetResult()
		err = v.blob("result", r.GetResult())
	case *leaseholdv1.RetryRequest:
		kind, tok, rep.Kind = leaseholdv1.ReportKind_REPORT_KIND_RETRY, r.GetToken(), store.ReportRetry
		// The error is required: a Retry without one would silently
		// fail the job as non-retryable.
		if r.GetError() == nil {
			err = store.Invalid("error", "is required")
			break
		}
		rep.Error = store.JobError{Code: r.GetError().GetCode(), Message: r.GetError().GetMessage(), Retryable: r.GetError().GetRetryable()}
		rep.RetryAfter, err = duration("retry_after", r.GetRetryAfter())
	case *leaseholdv1.CancelRequest:
		kind, tok, rep.Kind, rep.Reason = leaseholdv1.ReportKind_REPORT_KIND_CANCEL, r.GetToken(), store.ReportCancel, r.GetReason()
	case *leaseholdv1.ReleaseRequest:
		kind, tok, rep.Kind = leaseholdv1.ReportKind_REPORT_KIND_RELEASE, r.GetToken(), store.ReportRelease
	default:
		return 0, nil, store.Report{}, store.Invalid("msg", "not a report")
	}
	// The token first, as the store would: a malformed token is the
	// caller's first mistake whatever the rest says.
	if t, terr := v.token("token", tok); terr != nil {
		err = terr
	} else {
		rep.Token = t
	}
	return kind, tok, rep, err
}

// SaveCheckpoint validates a SaveCheckpointRequest.
func (v validator) SaveCheckpoint(r *leaseholdv1.SaveCheckpointRequest) (store.SaveCheckpointParams, error) {
	tok, err := v.token("token", r.GetToken())
	if err != nil {
		return store.SaveCheckpointParams{}, err
	}
	if err := v.blob("state", r.GetState()); err != nil {
		return store.SaveCheckpointParams{}, err
	}
	return store.SaveCheckpointParams{Token: tok, Phase: r.GetPhase(), State: r.GetState()}, nil
}

// ReserveEffect validates a ReserveEffectRequest.
func (v validator) ReserveEffect(r *leaseholdv1.ReserveEffectRequest) (store.ReserveEffectParams, error) {
	tok, err := v.token("token", r.GetToken())
	if err != nil {
		return store.ReserveEffectParams{}, err
	}
	return store.ReserveEffectParams{Token: tok, Key: r.GetEffectKey()}, nil
}

// RecordEffect validates a RecordEffectRequest.
func (v validator) RecordEffect(r *leaseholdv1.RecordEffectRequest) (store.RecordEffectParams, error) {
	tok, err := v.token("token", r.GetToken())
	if err != nil {
		return store.RecordEffectParams{}, err
	}
	var st store.EffectStatus
	switch r.GetStatus() {
	case leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED:
		st = store.EffectSucceeded
	case leaseholdv1.EffectStatus_EFFECT_STATUS_FAILED:
		st = store.EffectFailed
	case leaseholdv1.EffectStatus_EFFECT_STATUS_UNKNOWN:
		st = store.EffectUnknown
	default:
		return store.RecordEffectParams{}, store.Invalid("status", "must be SUCCEEDED, FAILED or UNKNOWN")
	}
	if err := v.blob("result", r.GetResult()); err != nil {
		return store.RecordEffectParams{}, err
	}
	return store.RecordEffectParams{Token: tok, Key: r.GetEffectKey(), Status: st,
		ProviderOperationID: r.GetProviderOperationId(), Result: r.GetResult()}, nil
}

// hello is a validated Hello.
type hello struct {
	workerID string
	queues   []string
	capacity int32
	labels   map[string]string
	sdk      string
	lease    time.Duration // 0: the queue policy's default
	// acks: the worker declared the lease_acks feature.
	acks bool
	// batches: the worker declared the lease_batches feature (it takes
	// LeaseBatch and ReportResultBatch); the session uses them only when
	// the coordinator has them on (Config.StreamBatchesOff).
	batches bool
}

// Hello features: at most helloFeaturesMax names of at most
// helloFeatureMaxLen bytes; unknown names are ignored.
const (
	helloFeaturesMax   = 16
	helloFeatureMaxLen = 64
	// FeatureLeaseAcks is the Hello feature of a worker that acknowledges
	// every pushed lease (see docs/streams.md).
	FeatureLeaseAcks = "lease_acks"
	// FeatureLeaseBatches is the Hello feature of a worker that takes
	// several leases, or several report answers, in one message (see
	// docs/streams.md).
	FeatureLeaseBatches = "lease_batches"
)

// Hello validates the first message of a Connect stream.
func (v validator) Hello(r *leaseholdv1.Hello) (hello, error) {
	if r == nil {
		return hello{}, store.Invalid("hello", "the first message must be hello")
	}
	if !store.ValidWorkerID(r.GetWorkerId()) {
		return hello{}, store.Invalid("hello.worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	qs := r.GetQueues()
	if len(qs) == 0 || len(qs) > store.QueuesMax {
		return hello{}, store.Invalid("hello.queues", fmt.Sprintf("must name 1-%d queues", store.QueuesMax))
	}
	for i, q := range qs {
		if err := requiredName(fmt.Sprintf("hello.queues[%d]", i), q); err != nil {
			return hello{}, err
		}
	}
	if r.GetCapacity() < 1 || r.GetCapacity() > CreditsMax {
		return hello{}, store.Invalid("hello.capacity", fmt.Sprintf("must be in [1, %d]", CreditsMax))
	}
	if len(r.GetLabels()) > LabelsMax {
		return hello{}, store.Invalid("hello.labels", fmt.Sprintf("must have at most %d entries", LabelsMax))
	}
	if err := store.ValidateMetadata("hello.labels", r.GetLabels()); err != nil {
		return hello{}, err
	}
	if err := store.ValidateText("hello.sdk_name", r.GetSdkName(), SDKFieldMaxLen, false); err != nil {
		return hello{}, err
	}
	if err := store.ValidateText("hello.sdk_version", r.GetSdkVersion(), SDKFieldMaxLen, false); err != nil {
		return hello{}, err
	}
	lease, err := v.leaseDuration("hello.lease_duration", r.GetLeaseDuration(), 0)
	if err != nil {
		return hello{}, err
	}
	if len(r.GetFeatures()) > helloFeaturesMax {
		return hello{}, store.Invalid("hello.features", fmt.Sprintf("must name at most %d features", helloFeaturesMax))
	}
	acks, batches := false, false
	for i, f := range r.GetFeatures() {
		if err := store.ValidateText(fmt.Sprintf("hello.features[%d]", i), f, helloFeatureMaxLen, true); err != nil {
			return hello{}, err
		}
		acks = acks || f == FeatureLeaseAcks
		batches = batches || f == FeatureLeaseBatches
	}
	sdk := r.GetSdkName()
	if r.GetSdkVersion() != "" {
		sdk += "/" + r.GetSdkVersion()
	}
	return hello{workerID: r.GetWorkerId(), queues: qs, capacity: r.GetCapacity(),
		labels: r.GetLabels(), sdk: sdk, lease: lease, acks: acks, batches: batches}, nil
}

// LeaseAck validates a LeaseAck: at most CreditsMax job ids (a stream
// never holds more unacknowledged leases); ids it does not hold are
// ignored by the caller.
func (v validator) LeaseAck(r *leaseholdv1.LeaseAck) ([]string, error) {
	if len(r.GetJobIds()) > CreditsMax {
		return nil, store.Invalid("ack.job_ids", fmt.Sprintf("must have at most %d ids", CreditsMax))
	}
	return r.GetJobIds(), nil
}

// CreditGrant validates a CreditGrant.
func (v validator) CreditGrant(r *leaseholdv1.CreditGrant) (int, error) {
	if r.GetCredits() < 1 || r.GetCredits() > CreditsMax {
		return 0, store.Invalid("credit.credits", fmt.Sprintf("must be in [1, %d]", CreditsMax))
	}
	return int(r.GetCredits()), nil
}

// Heartbeat validates a Heartbeat of the stream's worker. An unset
// lease_duration is def (the stream's).
func (v validator) Heartbeat(r *leaseholdv1.Heartbeat, worker string, def time.Duration) ([]store.LeaseToken, time.Duration, error) {
	toks, err := v.tokens("heartbeat.tokens", r.GetTokens(), worker)
	if err != nil {
		return nil, 0, err
	}
	lease, err := v.leaseDuration("heartbeat.lease_duration", r.GetLeaseDuration(), def)
	if err != nil {
		return nil, 0, err
	}
	return toks, lease, nil
}

func (v validator) queue(q string) (string, error) { return q, requiredName("queue", q) }

// GetQueue validates a GetQueueRequest.
func (v validator) GetQueue(r *leaseholdv1.GetQueueRequest) (string, error) {
	return v.queue(r.GetQueue())
}

// ListQueues validates a ListQueuesRequest: its max_staleness, zero when
// unset.
func (v validator) ListQueues(r *leaseholdv1.ListQueuesRequest) (time.Duration, error) {
	d, err := duration("max_staleness", r.GetMaxStaleness())
	if err != nil {
		return 0, err
	}
	if d > QueueCountsMaxStaleness {
		return 0, store.Invalid("max_staleness", fmt.Sprintf("must be at most %s", QueueCountsMaxStaleness))
	}
	return d, nil
}

// PauseQueue validates a PauseQueueRequest.
func (v validator) PauseQueue(r *leaseholdv1.PauseQueueRequest) (string, error) {
	return v.queue(r.GetQueue())
}

// ResumeQueue validates a ResumeQueueRequest.
func (v validator) ResumeQueue(r *leaseholdv1.ResumeQueueRequest) (string, error) {
	return v.queue(r.GetQueue())
}

// UpdateQueuePolicy validates an UpdateQueuePolicyRequest. Unset durations
// and zero numbers take the defaults; an unset jitter_fraction is
// store.RetryJitterFractionDefault, an explicit 0 means no jitter. The
// store validates the result again after defaults.
func (v validator) UpdateQueuePolicy(r *leaseholdv1.UpdateQueuePolicyRequest) (store.QueuePolicy, error) {
	p := r.GetPolicy()
	if p == nil {
		return store.QueuePolicy{}, store.Invalid("policy", "is required")
	}
	if err := requiredName("policy.queue", p.GetQueue()); err != nil {
		return store.QueuePolicy{}, err
	}
	rp := p.GetRetry()
	initial, err := duration("policy.retry.initial_delay", rp.GetInitialDelay())
	if err != nil {
		return store.QueuePolicy{}, err
	}
	maxDelay, err := duration("policy.retry.max_delay", rp.GetMaxDelay())
	if err != nil {
		return store.QueuePolicy{}, err
	}
	deadline, err := duration("policy.retry.total_retry_deadline", rp.GetTotalRetryDeadline())
	if err != nil {
		return store.QueuePolicy{}, err
	}
	lease, err := duration("policy.default_lease_duration", p.GetDefaultLeaseDuration())
	if err != nil {
		return store.QueuePolicy{}, err
	}
	jitter := store.RetryJitterFractionDefault
	if rp != nil && rp.JitterFraction != nil {
		jitter = rp.GetJitterFraction()
	}
	var backoff store.Backoff
	switch rp.GetBackoff() {
	case leaseholdv1.RetryBackoff_RETRY_BACKOFF_UNSPECIFIED, leaseholdv1.RetryBackoff_RETRY_BACKOFF_EXPONENTIAL:
		backoff = store.BackoffExponential
	case leaseholdv1.RetryBackoff_RETRY_BACKOFF_DECORRELATED:
		backoff = store.BackoffDecorrelated
	default:
		return store.QueuePolicy{}, store.Invalid("policy.retry.backoff", "must be a known RetryBackoff")
	}
	qp := store.QueuePolicy{
		Queue: p.GetQueue(),
		Retry: store.RetryPolicy{
			MaxAttempts:            rp.GetMaxAttempts(),
			InitialDelay:           initial,
			MaxDelay:               maxDelay,
			Multiplier:             rp.GetMultiplier(),
			JitterFraction:         jitter,
			RetryableErrorCodes:    rp.GetRetryableErrorCodes(),
			NonRetryableErrorCodes: rp.GetNonRetryableErrorCodes(),
			TotalRetryDeadline:     deadline,
			Backoff:                backoff,
		},
		DefaultLeaseDuration: lease,
		ConcurrencyLimit:     p.GetConcurrencyLimit(),
		KeyConcurrencyLimit:  p.GetKeyConcurrencyLimit(),
		DefaultDependency:    p.GetDefaultDependency(),
	}.WithDefaults()
	if rl := p.GetRateLimit(); rl != nil {
		iv, err := duration("policy.rate_limit.interval", rl.GetInterval())
		if err != nil {
			return store.QueuePolicy{}, err
		}
		qp.RateLimit = store.RateLimit{Starts: rl.GetStarts(), Interval: iv, PerKey: rl.GetPerKey()}
	}
	if err := qp.Validate(); err != nil {
		return store.QueuePolicy{}, err
	}
	return qp, nil
}

// ListDeadJobs validates a ListDeadJobsRequest.
func (v validator) ListDeadJobs(r *leaseholdv1.ListDeadJobsRequest) (store.ListDeadJobsParams, error) {
	if err := optionalName("queue", r.GetQueue()); err != nil {
		return store.ListDeadJobsParams{}, err
	}
	size, err := pageSize("page_size", r.GetPageSize(), PageSizeDefault, PageSizeMax)
	if err != nil {
		return store.ListDeadJobsParams{}, err
	}
	if err := pageToken("page_token", r.GetPageToken()); err != nil {
		return store.ListDeadJobsParams{}, err
	}
	view, err := jobView("view", r.GetView())
	if err != nil {
		return store.ListDeadJobsParams{}, err
	}
	filter, err := store.ParseJobFilter(r.GetFilter())
	if err != nil {
		return store.ListDeadJobsParams{}, err
	}
	return store.ListDeadJobsParams{Queue: r.GetQueue(), IncludeAbandoned: r.GetIncludeAbandoned(),
		Limit: size, Cursor: r.GetPageToken(), View: view, MaxBytes: v.pageBytes, Filter: filter}, nil
}

// GetDeadJob validates a GetDeadJobRequest.
func (v validator) GetDeadJob(r *leaseholdv1.GetDeadJobRequest) (string, error) {
	return r.GetJobId(), jobID("job_id", r.GetJobId())
}

// ReplayDeadJob validates a ReplayDeadJobRequest.
func (v validator) ReplayDeadJob(r *leaseholdv1.ReplayDeadJobRequest) (store.ReplayDeadJobParams, error) {
	return store.ReplayDeadJobParams{JobID: r.GetJobId(), Reason: r.GetReason()}, jobID("job_id", r.GetJobId())
}

// AbandonDeadJob validates an AbandonDeadJobRequest.
func (v validator) AbandonDeadJob(r *leaseholdv1.AbandonDeadJobRequest) (store.AbandonDeadJobParams, error) {
	return store.AbandonDeadJobParams{JobID: r.GetJobId(), Reason: r.GetReason()}, jobID("job_id", r.GetJobId())
}

// GetBreaker validates a GetBreakerRequest.
func (v validator) GetBreaker(r *leaseholdv1.GetBreakerRequest) (string, error) {
	return r.GetDependency(), requiredName("dependency", r.GetDependency())
}

// ResetBreaker validates a ResetBreakerRequest.
func (v validator) ResetBreaker(r *leaseholdv1.ResetBreakerRequest) (store.ResetBreakerParams, error) {
	if err := requiredName("dependency", r.GetDependency()); err != nil {
		return store.ResetBreakerParams{}, err
	}
	if err := store.ValidateReason(r.GetReason()); err != nil {
		return store.ResetBreakerParams{}, err
	}
	return store.ResetBreakerParams{Dependency: r.GetDependency(), Reason: r.GetReason()}, nil
}

// ForceOpenBreaker validates a ForceOpenBreakerRequest.
func (v validator) ForceOpenBreaker(r *leaseholdv1.ForceOpenBreakerRequest) (store.ForceOpenBreakerParams, error) {
	d, err := duration("duration", r.GetDuration())
	if err != nil {
		return store.ForceOpenBreakerParams{}, err
	}
	if err := store.ValidateForceOpenRequest(r.GetDependency(), d, r.GetReason()); err != nil {
		return store.ForceOpenBreakerParams{}, err
	}
	return store.ForceOpenBreakerParams{Dependency: r.GetDependency(), Duration: d, Reason: r.GetReason()}, nil
}

// UpdateBreakerPolicy validates an UpdateBreakerPolicyRequest and returns
// the policy with defaults filled in.
func (v validator) UpdateBreakerPolicy(r *leaseholdv1.UpdateBreakerPolicyRequest) (store.BreakerPolicy, error) {
	bp := r.GetPolicy()
	if bp == nil {
		return store.BreakerPolicy{}, store.Invalid("policy", "is required")
	}
	p := store.BreakerPolicy{
		Dependency: bp.GetDependency(), CountedErrorCodes: bp.GetCountedErrorCodes(),
		WindowSize: bp.GetWindowSize(), MinimumVolume: bp.GetMinimumVolume(),
		FailureRateThreshold: bp.GetFailureRateThreshold(), BackoffMultiplier: bp.GetBackoffMultiplier(),
		HalfOpenProbes: bp.GetHalfOpenProbes(),
	}
	for _, d := range []struct {
		field string
		in    *durationpb.Duration
		out   *time.Duration
	}{
		{"policy.window_duration", bp.GetWindowDuration(), &p.WindowDuration},
		{"policy.open_duration", bp.GetOpenDuration(), &p.OpenDuration},
		{"policy.max_open_duration", bp.GetMaxOpenDuration(), &p.MaxOpenDuration},
		{"policy.probe_timeout", bp.GetProbeTimeout(), &p.ProbeTimeout},
	} {
		var err error
		if *d.out, err = duration(d.field, d.in); err != nil {
			return store.BreakerPolicy{}, err
		}
	}
	switch {
	case len(p.CountedErrorCodes) > store.BreakerCodesMax:
		return store.BreakerPolicy{}, store.Invalid("policy.counted_error_codes", "must have at most 64 codes")
	case p.WindowSize < 0:
		return store.BreakerPolicy{}, store.Invalid("policy.window_size", "must not be negative")
	case p.MinimumVolume < 0:
		return store.BreakerPolicy{}, store.Invalid("policy.minimum_volume", "must not be negative")
	case p.HalfOpenProbes < 0:
		return store.BreakerPolicy{}, store.Invalid("policy.half_open_probes", "must not be negative")
	case p.FailureRateThreshold < 0:
		return store.BreakerPolicy{}, store.Invalid("policy.failure_rate_threshold", "must not be negative")
	case p.BackoffMultiplier < 0:
		return store.BreakerPolicy{}, store.Invalid("policy.backoff_multiplier", "must not be negative")
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return store.BreakerPolicy{}, err
	}
	return p, nil
}

// ListBreakerEvents validates a ListBreakerEventsRequest.
func (v validator) ListBreakerEvents(r *leaseholdv1.ListBreakerEventsRequest) (store.ListBreakerEventsParams, error) {
	if err := requiredName("dependency", r.GetDependency()); err != nil {
		return store.ListBreakerEventsParams{}, err
	}
	if r.GetAfterSequence() < 0 {
		return store.ListBreakerEventsParams{}, store.Invalid("after_sequence", "must not be negative")
	}
	size, err := pageSize("page_size", r.GetPageSize(), EventPageSizeDefault, EventPageSizeMax)
	if err != nil {
		return store.ListBreakerEventsParams{}, err
	}
	return store.ListBreakerEventsParams{Dependency: r.GetDependency(), AfterSequence: r.GetAfterSequence(), Limit: size}, nil
}

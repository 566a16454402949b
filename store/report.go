package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ReportKind names a lease-bound report.
type ReportKind uint8

// The reports. Every one is fenced by its token: it applies only while the
// token is the job's current, unexpired lease.
const (
	// ReportRenew extends the lease.
	ReportRenew ReportKind = iota + 1
	// ReportComplete finishes the job SUCCEEDED.
	ReportComplete
	// ReportRetry reports a failed attempt (see DecideFailure).
	ReportRetry
	// ReportCancel is the holder's cancel (see DecideCancelByHolder).
	ReportCancel
	// ReportRelease gives the job back (see DecideRelease).
	ReportRelease
)

func (k ReportKind) String() string {
	switch k {
	case ReportRenew:
		return "renew"
	case ReportComplete:
		return "complete"
	case ReportRetry:
		return "retry"
	case ReportCancel:
		return "cancel"
	case ReportRelease:
		return "release"
	}
	return fmt.Sprintf("report(%d)", uint8(k))
}

// Report is one lease-bound report. Only the fields of its kind are read.
type Report struct {
	Kind   ReportKind
	Tenant string
	Token  LeaseToken
	// Result of a Complete.
	Result []byte
	// Error and RetryAfter of a Retry.
	Error      JobError
	RetryAfter time.Duration
	// Reason of a Cancel.
	Reason string
	// LeaseDuration of a Renew; zero means the queue's default lease.
	LeaseDuration time.Duration
	// Now is the instant to judge the fence at; zero means the store's
	// clock.
	Now time.Time
}

// ReportResult is the answer to one report: exactly what the caller would
// have got had it been applied alone.
type ReportResult struct {
	// Job is the job after a Complete, Retry, Cancel or Release.
	Job *Job
	// Renew is a Renew's answer.
	Renew RenewResult
	// Err is the report's own refusal: ErrLeaseLost, ErrNotFound or
	// ErrReportMismatch. A fault of the whole batch is returned by
	// ApplyReports instead.
	Err error
}

// ValidateReport checks a report's fields before it joins a batch, so that
// one bad report never fails the others.
func ValidateReport(r Report) error {
	if err := ValidateLeaseCall(r.Tenant, r.Token); err != nil {
		return err
	}
	switch r.Kind {
	case ReportRenew:
		return ValidateLeaseDuration("lease_duration", r.LeaseDuration, true)
	case ReportComplete:
		return ValidateBlob("result", r.Result)
	case ReportRetry:
		if err := ValidateJobError(r.Error); err != nil {
			return err
		}
		return ValidateRetryAfter(r.RetryAfter)
	case ReportCancel:
		return ValidateReason(r.Reason)
	case ReportRelease:
		return nil
	}
	return Invalid("kind", "unknown report kind")
}

// ReportTx is what applying a batch of reports needs from an engine's
// write transaction. Its methods run SQL and decide nothing; ApplyReports
// decides.
type ReportTx interface {
	// LockLeases locks the jobs whose current, unexpired lease (judged at
	// each ref's Now, or the store's clock when zero) is the ref's token,
	// in (tenant, id) order so that two batches never wait on each other in
	// a cycle, and returns them by index into refs. A ref whose fence does
	// not hold is simply absent.
	LockLeases(ctx context.Context, refs []LeaseRef) (map[int]Held, error)
	// QueuePolicies returns the effective policy of each queue.
	QueuePolicies(ctx context.Context, queues []QueueRef) (map[QueueRef]QueuePolicy, error)
	// LockBreakers locks the breakers of keys (sorted, distinct), creating
	// each missing one as NewBreaker says, after LockLeases: jobs first,
	// then breakers, in every transaction that takes both, so none waits
	// on another in a cycle.
	LockBreakers(ctx context.Context, keys []BreakerKey) (map[BreakerKey]Breaker, error)
	// Inspect reads, without locking, each ref's job (nil when the tenant
	// has no such job) and the attempt row of the token's generation (nil
	// when there is none), by index into refs.
	Inspect(ctx context.Context, refs []LeaseRef) (map[int]Inspected, error)
	// Apply writes the changes: every Leave and Renewal carries its own
	// fence, and a fence that no longer holds is an error (it cannot happen
	// under the locks LockLeases took).
	Apply(ctx context.Context, c Changes) error
}

// LeaseRef is a report's fence: tenant, token and the instant to judge it
// at (zero: the store's clock).
type LeaseRef struct {
	Tenant string
	Token  LeaseToken
	Now    time.Time
}

// Inspected is a job and one of its attempts, read to answer a report
// whose fence did not hold.
type Inspected struct {
	Job     *Job
	Attempt *Attempt
}

// Changes is what a batch of reports writes.
type Changes struct {
	Leaves   []Leave
	Renewals []Renewal
	// Wake lists the queues that got jobs back (once each).
	Wake []QueueRef
	// Breakers are the breakers the reports changed, by key, with their
	// events.
	Breakers []BreakerChange
}

// Leave moves one leased job out of its lease and records the attempt
// that ended.
type Leave struct {
	Tenant string
	Token  LeaseToken
	// Queue is the job's queue.
	Queue string
	// Attempt and ClaimedAt describe the attempt that ends (its row is
	// written now, with Transition.Outcome).
	Attempt   int32
	ClaimedAt time.Time
	// Expired inverts the fence's expiry check: the reaper ends leases
	// that expired at Now, reports end leases that had not.
	Expired bool
	// FirstSeq is the sequence of the transition's first event.
	FirstSeq int64
	// Now is the instant of the change (finished_at, event times).
	Now        time.Time
	Transition Transition
	// Record is the ended attempt's record (EncodeAttemptRecord), which
	// the engine appends to the row's attempt log: it is where the
	// transition's events are kept.
	Record string
	// Spill says the log is full (AttemptLogCap records): its oldest
	// record moves to job_attempts, in the same transaction, to make room.
	Spill bool
}

// Renewal extends one lease.
type Renewal struct {
	Tenant    string
	Token     LeaseToken
	ExpiresAt time.Time
	// Now is the instant the renewal was judged at; the lease must still
	// be unexpired then.
	Now time.Time
}

// ApplyReports decides and applies a batch of reports inside tx: the
// reports are judged in order, as if each ran alone after the ones before
// it, and each gets its own answer. rnd draws retry jitter.
//
//  1. Every report's fence is checked and its job locked at once
//     (LockLeases).
//  2. Each report whose lease holds is decided (DecideComplete,
//     DecideFailure, …, or a renewal); the job is then no longer leased
//     for the reports after it in the batch.
//  3. Every other report is answered from what it finds (see
//     AnswerUnheld): a job this batch already ended is judged against the
//     batch's own transition, any other against the committed row.
//  4. The transitions and renewals are written (Apply), set-based where
//     the engine can.
//
// An error from tx fails the whole batch: nothing may be acknowledged that
// was not committed, so the caller answers every report with it.
func ApplyReports(ctx context.Context, tx ReportTx, reports []Report, rnd func() float64) ([]ReportResult, error) {
	b := &reportBatch{
		reports: reports, rnd: rnd,
		out:      make([]ReportResult, len(reports)),
		changed:  map[BreakerKey]*BreakerChange{},
		current:  map[jobKey]Held{},
		finished: map[jobKey]endedLease{},
		woken:    map[QueueRef]bool{},
		renewals: map[jobKey]Renewal{},
	}
	if err := b.lock(ctx, tx); err != nil {
		return nil, err
	}
	for i, r := range reports {
		if err := b.decide(i, r); err != nil {
			return nil, err
		}
	}
	b.collect()
	if err := b.answerUnheld(ctx, tx); err != nil {
		return nil, err
	}
	c := b.changes
	if len(c.Leaves) > 0 || len(c.Renewals) > 0 || len(c.Breakers) > 0 {
		if err := tx.Apply(ctx, c); err != nil {
			return nil, err
		}
	}
	return b.out, nil
}

// jobKey names a job within a batch.
type jobKey struct{ tenant, id string }

// endedLease is a lease a report of the batch ended, and how.
type endedLease struct {
	report Report
	job    *Job
	t      Transition
}

// reportBatch is one ApplyReports: what it locked, what each report
// decided, and the changes to write.
type reportBatch struct {
	reports  []Report
	rnd      func() float64
	refs     []LeaseRef
	held     map[int]Held
	policies map[QueueRef]QueuePolicy
	breakers map[BreakerKey]Breaker
	changed  map[BreakerKey]*BreakerChange

	out      []ReportResult
	changes  Changes
	current  map[jobKey]Held       // leases still held in this batch
	finished map[jobKey]endedLease // leases this batch ended
	unheld   []int
	woken    map[QueueRef]bool
	// renewals holds one renewal per job, the batch's last: a job renewed
	// twice is written once, and one that a later report ends is not
	// renewed at all.
	renewals map[jobKey]Renewal
	renewOrd []jobKey
}

// lock locks every lease the reports name, and reads the policies and
// breakers their decisions need.
func (b *reportBatch) lock(ctx context.Context, tx ReportTx) error {
	b.refs = make([]LeaseRef, len(b.reports))
	for i, r := range b.reports {
		b.refs[i] = LeaseRef{Tenant: r.Tenant, Token: r.Token, Now: r.Now}
	}
	var err error
	if b.held, err = tx.LockLeases(ctx, b.refs); err != nil {
		return err
	}
	if b.policies, err = tx.QueuePolicies(ctx, policiesNeeded(b.reports, b.held)); err != nil {
		return err
	}
	if keys := breakersNeeded(b.reports, b.held); len(keys) > 0 {
		if b.breakers, err = tx.LockBreakers(ctx, keys); err != nil {
			return err
		}
	}
	return nil
}

// decide answers report i against its lease as the batch has left it so
// far.
func (b *reportBatch) decide(i int, r Report) error {
	key := jobKey{r.Tenant, r.Token.JobID}
	h, locked := b.held[i]
	if locked {
		if prev, ok := b.current[key]; ok {
			h = prev // an earlier report of the batch renewed it
		} else if _, gone := b.finished[key]; gone {
			locked = false // an earlier report of the batch ended it
		}
	}
	if !locked {
		if e, ok := b.finished[key]; ok {
			b.out[i] = answerEnded(r, e.report, e.job)
		} else {
			b.unheld = append(b.unheld, i)
		}
		return nil
	}
	if r.Kind == ReportRenew {
		b.renew(i, r, key, h)
		return nil
	}
	var t Transition
	switch r.Kind {
	case ReportComplete:
		t = DecideComplete(h, r.Token, r.Result)
	case ReportRetry:
		policy := b.policies[QueueRef{r.Tenant, h.Job.Queue}]
		t = DecideFailure(policy.Retry, creditHeld(h, b.breakers), r.Token, r.Error, r.RetryAfter, b.rnd())
	case ReportCancel:
		t = DecideCancelByHolder(r.Token, r.Reason)
	case ReportRelease:
		t = DecideRelease(h, r.Token)
	default:
		return fmt.Errorf("report %d: unknown kind %v", i, r.Kind)
	}
	b.end(i, r, key, h, t)
	return nil
}

// renew extends the lease h (the batch writes each job's last renewal).
func (b *reportBatch) renew(i int, r Report, key jobKey, h Held) {
	d := b.policies[QueueRef{r.Tenant, h.Job.Queue}].LeaseFor(r.LeaseDuration)
	expires := h.Now.Add(d).UTC().Truncate(time.Microsecond)
	h.Job.LeaseExpiresAt = expires
	b.current[key] = h
	if _, ok := b.renewals[key]; !ok {
		b.renewOrd = append(b.renewOrd, key)
	}
	b.renewals[key] = Renewal{Tenant: r.Tenant, Token: r.Token, ExpiresAt: expires, Now: h.Now}
	status := RenewRenewed
	if h.Job.CancelRequested {
		// Still extended: the holder needs time to acknowledge.
		status = RenewCancelRequested
	}
	b.out[i] = ReportResult{Renew: RenewResult{Token: r.Token, Status: status, ExpiresAt: expires}}
}

// end ends the lease h with t.
func (b *reportBatch) end(i int, r Report, key jobKey, h Held, t Transition) {
	closed := foldOutcome(b.breakers, b.changed, h, r)
	job := t.Apply(h.Job, h.Now)
	delete(b.current, key)
	delete(b.renewals, key)
	b.finished[key] = endedLease{report: r, job: job, t: t}
	b.changes.Leaves = append(b.changes.Leaves, leaveOf(h, r.Token, t, false))
	// A probe that closes its breaker frees the jobs it held; the probe's
	// queue is where they most likely wait, so wake it rather than leave
	// them to the next poll.
	if q := (QueueRef{r.Tenant, h.Job.Queue}); (t.Requeued() || closed) && !b.woken[q] {
		b.woken[q] = true
		b.changes.Wake = append(b.changes.Wake, q)
	}
	b.out[i] = ReportResult{Job: job}
}

// collect adds the breaker changes and the last renewal of each job to the
// changes, in a stable order.
func (b *reportBatch) collect() {
	for _, k := range slices.SortedFunc(maps.Keys(b.changed), compareBreakerKeys) {
		b.changes.Breakers = append(b.changes.Breakers, *b.changed[k])
	}
	for _, key := range b.renewOrd {
		if rn, ok := b.renewals[key]; ok {
			b.changes.Renewals = append(b.changes.Renewals, rn)
		}
	}
}

// answerUnheld answers the reports whose lease the batch did not hold,
// from what the store says of each job and attempt.
func (b *reportBatch) answerUnheld(ctx context.Context, tx ReportTx) error {
	if len(b.unheld) == 0 {
		return nil
	}
	irefs := make([]LeaseRef, len(b.unheld))
	for k, i := range b.unheld {
		irefs[k] = b.refs[i]
	}
	found, err := tx.Inspect(ctx, irefs)
	if err != nil {
		return err
	}
	for k, i := range b.unheld {
		got := found[k]
		b.out[i] = AnswerUnheld(b.reports[i], got.Job, got.Attempt)
	}
	return nil
}

// leaveOf is the Leave that applies t to the job h holds for tok.
func leaveOf(h Held, tok LeaseToken, t Transition, expired bool) Leave {
	return Leave{
		Tenant: h.Job.Tenant, Token: tok, Queue: h.Job.Queue,
		Attempt: h.Job.Attempts, ClaimedAt: h.Job.LeasedAt, Expired: expired,
		FirstSeq: h.EventSeq + 1, Now: h.Now, Transition: t,
		Record: EncodeAttemptRecord(AttemptRecordOf(h, tok, t)),
		Spill:  h.AttemptLogLen >= AttemptLogCap,
	}
}

// policiesNeeded lists the queues whose policies the held reports need:
// retries decide with the retry policy, renewals take the queue's default
// and maximum lease.
func policiesNeeded(reports []Report, held map[int]Held) []QueueRef {
	seen := map[QueueRef]bool{}
	var out []QueueRef
	for i, r := range reports {
		h, ok := held[i]
		if !ok || (r.Kind != ReportRetry && r.Kind != ReportRenew) {
			continue
		}
		q := QueueRef{Tenant: r.Tenant, Queue: h.Job.Queue}
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}

// breakersNeeded lists (sorted, distinct) the breakers of the jobs the
// held reports end: Completes and Retries are outcomes (Retries with
// uncounted codes too, since their retry deadline is credited with the
// breaker's holds: creditHeld), and a Release or holder Cancel of a probe
// frees its slot (foldOutcome).
func breakersNeeded(reports []Report, held map[int]Held) []BreakerKey {
	seen := map[BreakerKey]bool{}
	var out []BreakerKey
	for i, r := range reports {
		h, ok := held[i]
		if !ok || h.Job.Dependency == "" || r.Kind == ReportRenew {
			continue
		}
		k := BreakerKey{Tenant: r.Tenant, Dependency: h.Job.Dependency}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareBreakerKeys)
	return out
}

func compareBreakerKeys(a, b BreakerKey) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Dependency, b.Dependency))
}

// creditHeld is h with the job's retry deadline moved on by the time its
// breaker held it back since it was created: waiting behind an open
// breaker spends none of its time budget.
func creditHeld(h Held, breakers map[BreakerKey]Breaker) Held {
	b, ok := breakers[BreakerKey{h.Job.Tenant, h.Job.Dependency}]
	if !ok || h.Job.RetryDeadline.IsZero() {
		return h
	}
	if d := b.HeldDuring(h.Job.CreatedAt, h.Now); d > 0 {
		j := *h.Job
		j.RetryDeadline = j.RetryDeadline.Add(d)
		h.Job = &j
	}
	return h
}

// foldOutcome folds report r of the job h holds into its breaker, when it
// is an outcome (a Complete, or a Retry with a counted code), keeping the
// breaker's running state in breakers and what changed in changed. It
// reports whether the outcome closed the breaker.
func foldOutcome(breakers map[BreakerKey]Breaker, changed map[BreakerKey]*BreakerChange, h Held, r Report) bool {
	k := BreakerKey{h.Job.Tenant, h.Job.Dependency}
	b, ok := breakers[k]
	if !ok {
		return false
	}
	var (
		next   Breaker
		events []NewBreakerEvent
	)
	switch failed := r.Kind == ReportRetry; {
	case r.Kind == ReportRelease || r.Kind == ReportCancel:
		if next, ok = ForgetProbe(b, r.Token); !ok {
			return false
		}
	case failed && !b.Policy.Counts(r.Error):
		if next, ok = ForgetProbe(b, r.Token); !ok {
			return false
		}
	default:
		next, events = DecideBreakerOutcome(b, r.Token, failed, h.Now)
	}
	recordBreaker(breakers, changed, k, b, next, events, h.Now)
	return b.State != BreakerClosed && next.State == BreakerClosed
}

// recordBreaker keeps next as the running state of breaker k (b before
// the change) and accumulates the change and its events in changed.
func recordBreaker(breakers map[BreakerKey]Breaker, changed map[BreakerKey]*BreakerChange, k BreakerKey, b, next Breaker,
	events []NewBreakerEvent, now time.Time) {
	c, ok := changed[k]
	if !ok {
		c = &BreakerChange{FirstSeq: b.EventSeq + 1}
		changed[k] = c
	}
	next.EventSeq += int64(len(events))
	breakers[k] = next
	c.Breaker, c.Now = next, now
	c.Events = append(c.Events, events...)
}

// answerEnded answers report r about a job that an earlier report of the
// same batch (first) ended, as AnswerUnheld would once that batch
// committed.
func answerEnded(r, first Report, job *Job) ReportResult {
	attempt := &Attempt{JobID: job.ID, LeaseGeneration: first.Token.Generation, WorkerID: first.Token.WorkerID}
	switch {
	case first.Kind == ReportComplete:
		attempt.Outcome = AttemptSucceeded
	case first.Kind == ReportRetry:
		attempt.Outcome, attempt.Error = AttemptFailed, &first.Error
	case first.Kind == ReportCancel || job.State == JobStateCancelled:
		attempt.Outcome = AttemptCancelled
	default:
		attempt.Outcome = AttemptReleased
	}
	return AnswerUnheld(r, job, attempt)
}

// AnswerUnheld answers a report whose fence did not hold, from the job as
// it is (nil when the tenant has no such job) and the attempt row of the
// report's generation (nil when there is none):
//
//   - no such job: ErrNotFound;
//   - the report repeats the terminal report that this very lease
//     (worker and generation) already made, because its answer was lost:
//     the job as it is now, with no new event. A Complete, Cancel or Retry
//     is recognised by the attempt's outcome (a Retry's job may have moved
//     on since: requeued, leased again, finished);
//   - the same lease repeating it with another result or error:
//     ErrReportMismatch, since the first report is the one that stands;
//   - a renewal of a lease that a report made with its own token ended
//     (the attempt's outcome is the report's, not an expiry): RenewReported,
//     so that a heartbeat racing the holder's own report is not taken for a
//     lost lease;
//   - anything else: ErrLeaseLost (RenewLost for a renewal).
//
// Release is never a repeat: after it the answer is ErrLeaseLost.
func AnswerUnheld(r Report, job *Job, attempt *Attempt) ReportResult {
	if job == nil {
		return ReportResult{Err: fmt.Errorf("job %s: %w", r.Token.JobID, ErrNotFound)}
	}
	lost := func() ReportResult {
		if r.Kind == ReportRenew {
			return ReportResult{Renew: RenewResult{Token: r.Token, Status: RenewLost}}
		}
		return ReportResult{Err: fmt.Errorf("job %s generation %d: %w", r.Token.JobID, r.Token.Generation, ErrLeaseLost)}
	}
	if attempt == nil || attempt.WorkerID != r.Token.WorkerID || attempt.LeaseGeneration != r.Token.Generation {
		return lost()
	}
	if r.Kind == ReportRenew {
		if endedByReport(attempt.Outcome) {
			return ReportResult{Renew: RenewResult{Token: r.Token, Status: RenewReported}}
		}
		return lost()
	}
	sameLease := job.LeaseOwner == r.Token.WorkerID && job.LeaseGeneration == r.Token.Generation
	mismatch := func(what string) ReportResult {
		return ReportResult{Err: fmt.Errorf("job %s generation %d already reported with another %s: %w",
			r.Token.JobID, r.Token.Generation, what, ErrReportMismatch)}
	}
	switch r.Kind {
	case ReportComplete:
		if !sameLease || job.State != JobStateSucceeded || attempt.Outcome != AttemptSucceeded {
			return lost()
		}
		if !bytes.Equal(job.Result, r.Result) {
			return mismatch("result")
		}
		return ReportResult{Job: job}
	case ReportCancel:
		if !sameLease || job.State != JobStateCancelled || attempt.Outcome != AttemptCancelled {
			return lost()
		}
		return ReportResult{Job: job}
	case ReportRetry:
		if attempt.Outcome != AttemptFailed {
			return lost()
		}
		if attempt.Error != nil && (attempt.Error.Code != r.Error.Code || attempt.Error.Message != r.Error.Message) {
			return mismatch("error")
		}
		return ReportResult{Job: job}
	default:
		// any other kind: answered as a lost lease, below
	}
	return lost()
}

// endedByReport reports whether an attempt with outcome o was ended by a
// report made with its lease's token (complete, retry, cancel, release),
// rather than by its lease expiring or still running.
func endedByReport(o AttemptOutcome) bool {
	switch o {
	case AttemptSucceeded, AttemptFailed, AttemptCancelled, AttemptReleased:
		return true
	default:
		return false
	}
}

// Reporter implements the lease-bound methods of Store (Renew, Complete,
// Retry, CancelByHolder, Release and ApplyReports) once for every engine:
// it validates each report and hands it to Submit, which applies it in a
// batch with other callers' reports (one transaction, one commit) and
// returns only after that commit. Engines embed it with Submit set to
// their group committer.
type Reporter struct {
	Submit func(ctx context.Context, reports []Report) ([]ReportResult, error)
}

// ApplyReports implements Store: the reports are validated, then applied
// together in one batch; each gets its own result. An invalid report fails
// the call before anything is applied.
func (r Reporter) ApplyReports(ctx context.Context, reports []Report) ([]ReportResult, error) {
	if len(reports) == 0 || len(reports) > BatchMaxItems {
		return nil, Invalid("reports", fmt.Sprintf("must have 1-%d items", BatchMaxItems))
	}
	for i, rep := range reports {
		if err := ValidateReport(rep); err != nil {
			return nil, renamed(err, fmt.Sprintf("reports[%d].", i))
		}
	}
	return r.Submit(ctx, reports)
}

// one validates and submits a single report and returns its job.
func (r Reporter) one(ctx context.Context, rep Report) (*Job, error) {
	if err := ValidateReport(rep); err != nil {
		return nil, err
	}
	res, err := r.Submit(ctx, []Report{rep})
	if err != nil {
		return nil, err
	}
	return res[0].Job, res[0].Err
}

// Renew implements Store.
func (r Reporter) Renew(ctx context.Context, p RenewParams) ([]RenewResult, error) {
	if err := ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := ValidateRenew(p); err != nil {
		return nil, err
	}
	reps := make([]Report, len(p.Tokens))
	for i, t := range p.Tokens {
		reps[i] = Report{Kind: ReportRenew, Tenant: p.Tenant, Token: t, LeaseDuration: p.LeaseDuration, Now: p.Now}
	}
	res, err := r.Submit(ctx, reps)
	if err != nil {
		return nil, err
	}
	out := make([]RenewResult, len(res))
	for i, x := range res {
		if x.Err != nil && !errors.Is(x.Err, ErrLeaseLost) && !errors.Is(x.Err, ErrNotFound) {
			return nil, x.Err
		}
		out[i] = x.Renew
		if x.Err != nil {
			out[i] = RenewResult{Token: p.Tokens[i], Status: RenewLost}
		}
	}
	return out, nil
}

// Complete implements Store.
func (r Reporter) Complete(ctx context.Context, p CompleteParams) (*Job, error) {
	return r.one(ctx, Report{Kind: ReportComplete, Tenant: p.Tenant, Token: p.Token, Result: p.Result, Now: p.Now})
}

// Retry implements Store.
func (r Reporter) Retry(ctx context.Context, p RetryParams) (*Job, error) {
	return r.one(ctx, Report{Kind: ReportRetry, Tenant: p.Tenant, Token: p.Token, Error: p.Error, RetryAfter: p.RetryAfter, Now: p.Now})
}

// CancelByHolder implements Store.
func (r Reporter) CancelByHolder(ctx context.Context, p CancelByHolderParams) (*Job, error) {
	return r.one(ctx, Report{Kind: ReportCancel, Tenant: p.Tenant, Token: p.Token, Reason: p.Reason, Now: p.Now})
}

// Release implements Store.
func (r Reporter) Release(ctx context.Context, p ReleaseParams) (*Job, error) {
	return r.one(ctx, Report{Kind: ReportRelease, Tenant: p.Tenant, Token: p.Token, Now: p.Now})
}

// renamed prefixes the field of an *InvalidError.
func renamed(err error, prefix string) error {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return Invalid(prefix+inv.Field, inv.Reason)
	}
	return err
}

// ReapTx is what ending expired leases needs from an engine's write
// transaction.
type ReapTx interface {
	// LockBreakers is ReportTx.LockBreakers.
	LockBreakers(ctx context.Context, keys []BreakerKey) (map[BreakerKey]Breaker, error)
	// LockExpired locks up to limit leased jobs, across tenants, whose
	// lease expired at now (zero: the store's clock), earliest first,
	// skipping rows another transaction holds, so that several reapers
	// never end the same lease twice. Held.Now is the instant they were
	// judged at.
	LockExpired(ctx context.Context, now time.Time, limit int) ([]Held, error)
	// Apply is ReportTx.Apply.
	Apply(ctx context.Context, c Changes) error
	// NextExpiry is the earliest expiry among leases still held after the
	// changes, zero when there is none.
	NextExpiry(ctx context.Context) (time.Time, error)
}

// Reap ends expired leases inside tx, each as DecideExpiry says: QUEUED
// again, CANCELLED or DEAD, with its attempt recorded as lease_expired.
func Reap(ctx context.Context, tx ReapTx, p ReapParams) (ReapResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = ReapBatchDefault
	}
	held, err := tx.LockExpired(ctx, p.Now, limit)
	if err != nil {
		return ReapResult{}, err
	}
	// The breakers of expired jobs that name a dependency: their held
	// time is credited to the retry deadline, and an expired probe frees
	// its slot. Locked after the jobs, as everywhere.
	var (
		breakers map[BreakerKey]Breaker
		changed  = map[BreakerKey]*BreakerChange{}
		keys     []BreakerKey
		seen     = map[BreakerKey]bool{}
	)
	for _, h := range held {
		if k := (BreakerKey{h.Job.Tenant, h.Job.Dependency}); k.Dependency != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		slices.SortFunc(keys, compareBreakerKeys)
		if breakers, err = tx.LockBreakers(ctx, keys); err != nil {
			return ReapResult{}, err
		}
	}
	var (
		res     ReapResult
		changes Changes
		woken   = map[QueueRef]bool{}
	)
	for _, h := range held {
		j := h.Job
		tok := LeaseToken{JobID: j.ID, Generation: j.LeaseGeneration, WorkerID: j.LeaseOwner}
		t := DecideExpiry(creditHeld(h, breakers))
		if k := (BreakerKey{j.Tenant, j.Dependency}); k.Dependency != "" {
			if b, ok := breakers[k]; ok {
				if next, forgot := ForgetProbe(b, tok); forgot {
					recordBreaker(breakers, changed, k, b, next, nil, h.Now)
				}
			}
		}
		changes.Leaves = append(changes.Leaves, leaveOf(h, tok, t, true))
		res.Jobs = append(res.Jobs, t.Apply(j, h.Now))
		if q := (QueueRef{j.Tenant, j.Queue}); t.Requeued() && !woken[q] {
			woken[q] = true
			res.Requeued = append(res.Requeued, q)
		}
	}
	changes.Wake = res.Requeued
	for _, k := range slices.SortedFunc(maps.Keys(changed), compareBreakerKeys) {
		changes.Breakers = append(changes.Breakers, *changed[k])
	}
	if len(changes.Leaves) > 0 {
		if err := tx.Apply(ctx, changes); err != nil {
			return ReapResult{}, err
		}
	}
	if res.NextExpiry, err = tx.NextExpiry(ctx); err != nil {
		return ReapResult{}, err
	}
	return res, nil
}

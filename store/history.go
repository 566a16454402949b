package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// A job's history lives in its row (migration 013). The running attempt is
// in columns (lease_owner, lease_generation, attempts, leased_at, and
// leased_until and leased_seq, which a claim writes and a renewal never
// touches); every ended attempt is an AttemptRecord appended, by the
// statement that ends it, to the row's attempt log (jsonb on PostgreSQL,
// JSON text on SQLite). Past AttemptLogCap records the oldest one moves to
// job_attempts (with its record), so the history stays complete and the row
// stays bounded; job_attempts is written for no other job.
//
// Events are derived, not inserted, where the row holds them
// (DeriveEvents): QUEUED from the create, LEASED from each attempt's claim,
// and the events that ended each attempt (RUN_FAILED, LEASE_EXPIRED,
// RELEASED and the terminal event) from its record, which keeps the
// sequence numbers they took. The rare events (CHECKPOINT_SAVED,
// CANCEL_REQUESTED, REPLAYED, ABANDONED, a client's cancel and operator
// actions) are still inserted into job_events with their sequence numbers.
// Every statement that makes an event still raises last_event_seq under the
// row lock, so sequences stay gapless and in the order they always had.
//
// Rows written before migration 013 have every event stored: their
// events_stored_through is past any sequence, and the first statement that
// derives an event for such a row lowers it to the last stored sequence.
// Derived events at or below it are never shown (the stored ones are).

// AttemptLogCap is how many ended attempts a job row keeps in its attempt
// log; past it the oldest move to job_attempts.
const AttemptLogCap = 50

// EventsAllStored is events_stored_through of a row written before
// migration 013: every event of it is in job_events.
const EventsAllStored int64 = 1<<63 - 1

// AttemptRecord is one ended attempt as the job row keeps it.
type AttemptRecord struct {
	Attempt    int32
	Generation int64
	WorkerID   string
	ClaimedAt  time.Time
	// LeasedUntil is the expiry the claim gave (renewals do not change
	// it); LeasedSeq is the LEASED event's sequence. Both are zero for an
	// attempt claimed before migration 013.
	LeasedUntil time.Time
	LeasedSeq   int64
	FinishedAt  time.Time
	Outcome     AttemptOutcome
	// State is the job's state after the attempt ended; EndSeq the
	// sequence of the first event its end made (they are consecutive).
	State  JobState
	EndSeq int64
	// Error is the worker's error of a failed attempt.
	Error *JobError
	// RetryDelay and RetryAt are the backoff of a failed attempt that was
	// retried (State QUEUED).
	RetryDelay time.Duration
	RetryAt    time.Time
	// CancelReason and CancelBy say why an attempt that ended the job
	// CANCELLED did ("holder" or "release" for an attempt cancelled by its
	// holder).
	CancelReason string
	CancelBy     string
	// MaxAttempts is the job's budget, kept for a DEAD end.
	MaxAttempts int32
}

// AsAttempt is the record as ListAttempts shows it.
func (r AttemptRecord) AsAttempt(jobID string) Attempt {
	a := Attempt{JobID: jobID, Attempt: r.Attempt, LeaseGeneration: r.Generation, WorkerID: r.WorkerID,
		ClaimedAt: r.ClaimedAt, FinishedAt: r.FinishedAt, Outcome: r.Outcome}
	if r.Error != nil {
		e := *r.Error
		a.Error = &e
	}
	return a
}

// AttemptRecordOf is the record of the attempt h held, ended by t (the
// decision for token tok) at h.Now.
func AttemptRecordOf(h Held, tok LeaseToken, t Transition) AttemptRecord {
	r := AttemptRecord{
		Attempt: h.Job.Attempts, Generation: tok.Generation, WorkerID: tok.WorkerID,
		ClaimedAt: h.Job.LeasedAt, LeasedUntil: h.LeasedUntil, LeasedSeq: h.LeasedSeq,
		FinishedAt: h.Now, Outcome: t.Outcome, State: t.State, EndSeq: h.EventSeq + 1,
		RetryDelay: t.RetryDelay, CancelReason: t.CancelReason, CancelBy: t.CancelBy,
	}
	if e := t.AttemptError; e != nil {
		c := *e
		r.Error = &c
	}
	if t.State == JobStateQueued && t.Outcome == AttemptFailed {
		r.RetryAt = t.AvailableAt
	}
	if t.State == JobStateDead {
		r.MaxAttempts = h.Job.MaxAttempts
	}
	return r
}

// EncodeAttemptRecord is the record's JSON, the one encoding both engines
// store (short keys: it is written once per attempt of every job).
func EncodeAttemptRecord(r AttemptRecord) string {
	b := make([]byte, 0, 192)
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"g":`...)
	b = strconv.AppendInt(b, r.Generation, 10)
	b = append(b, `,"w":`...)
	b = appendJSONString(b, r.WorkerID)
	b = appendTimeField(b, "c", r.ClaimedAt)
	b = appendTimeField(b, "x", r.LeasedUntil)
	if r.LeasedSeq != 0 {
		b = append(b, `,"s":`...)
		b = strconv.AppendInt(b, r.LeasedSeq, 10)
	}
	b = appendTimeField(b, "f", r.FinishedAt)
	b = append(b, `,"o":`...)
	b = appendJSONString(b, string(r.Outcome))
	b = append(b, `,"st":`...)
	b = appendJSONString(b, string(r.State))
	b = append(b, `,"e":`...)
	b = strconv.AppendInt(b, r.EndSeq, 10)
	if e := r.Error; e != nil {
		b = append(b, `,"ec":`...)
		b = appendJSONString(b, e.Code)
		b = append(b, `,"em":`...)
		b = appendJSONString(b, e.Message)
		b = append(b, `,"er":`...)
		b = strconv.AppendBool(b, e.Retryable)
	}
	if r.RetryDelay != 0 {
		b = append(b, `,"rd":`...)
		b = strconv.AppendInt(b, int64(r.RetryDelay), 10)
	}
	b = appendTimeField(b, "a", r.RetryAt)
	if r.State == JobStateCancelled {
		b = append(b, `,"r":`...)
		b = appendJSONString(b, r.CancelReason)
	}
	if r.CancelBy != "" {
		b = append(b, `,"by":`...)
		b = appendJSONString(b, r.CancelBy)
	}
	if r.MaxAttempts != 0 {
		b = append(b, `,"m":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	return string(append(b, '}'))
}

func appendTimeField(b []byte, key string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendJSONString(b, t.UTC().Format(time.RFC3339Nano))
}

// attemptWire is the decoding side of EncodeAttemptRecord.
type attemptWire struct {
	N  int32   `json:"n"`
	G  int64   `json:"g"`
	W  string  `json:"w"`
	C  string  `json:"c"`
	X  string  `json:"x"`
	S  int64   `json:"s"`
	F  string  `json:"f"`
	O  string  `json:"o"`
	St string  `json:"st"`
	E  int64   `json:"e"`
	EC *string `json:"ec"`
	EM string  `json:"em"`
	ER bool    `json:"er"`
	RD int64   `json:"rd"`
	A  string  `json:"a"`
	R  string  `json:"r"`
	By string  `json:"by"`
	M  int32   `json:"m"`
}

func (w attemptWire) record() (AttemptRecord, error) {
	r := AttemptRecord{
		Attempt: w.N, Generation: w.G, WorkerID: w.W, LeasedSeq: w.S, Outcome: AttemptOutcome(w.O),
		State: JobState(w.St), EndSeq: w.E, RetryDelay: time.Duration(w.RD), CancelReason: w.R,
		CancelBy: w.By, MaxAttempts: w.M,
	}
	if w.EC != nil {
		r.Error = &JobError{Code: *w.EC, Message: w.EM, Retryable: w.ER}
	}
	for _, f := range []struct {
		s string
		t *time.Time
	}{{w.C, &r.ClaimedAt}, {w.X, &r.LeasedUntil}, {w.F, &r.FinishedAt}, {w.A, &r.RetryAt}} {
		if f.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.s)
		if err != nil {
			return AttemptRecord{}, fmt.Errorf("attempt record: %w", err)
		}
		*f.t = t.UTC()
	}
	return r, nil
}

// DecodeAttemptRecord reads one record.
func DecodeAttemptRecord(s string) (AttemptRecord, error) {
	var w attemptWire
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return AttemptRecord{}, fmt.Errorf("attempt record: %w", err)
	}
	return w.record()
}

// DecodeAttemptLog reads a row's attempt log (a JSON array of records;
// empty text is an empty log).
func DecodeAttemptLog(s string) ([]AttemptRecord, error) {
	if s == "" {
		return nil, nil
	}
	var ws []attemptWire
	if err := json.Unmarshal([]byte(s), &ws); err != nil {
		return nil, fmt.Errorf("attempt log: %w", err)
	}
	out := make([]AttemptRecord, 0, len(ws))
	for _, w := range ws {
		r, err := w.record()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// FindAttempt is the record of generation gen in log, or nil.
func FindAttempt(log []AttemptRecord, gen int64) *AttemptRecord {
	for i := range log {
		if log[i].Generation == gen {
			return &log[i]
		}
	}
	return nil
}

// QueuedAvailableAt is what a create stores as the QUEUED event's
// available_at: zero (NULL) when it is the creation time, as it is for
// every job created to run now.
func QueuedAvailableAt(j *Job) time.Time {
	if j.AvailableAt.Equal(j.CreatedAt) {
		return time.Time{}
	}
	return j.AvailableAt
}

// HistoryRow is what a job row holds of its history, as DeriveEvents reads
// it.
type HistoryRow struct {
	Job *Job
	// QueuedAvailableAt is the create's available_at; zero: CreatedAt.
	QueuedAvailableAt time.Time
	// LeasedUntil and LeasedSeq are the running attempt's (see
	// AttemptRecord).
	LeasedUntil time.Time
	LeasedSeq   int64
	// StoredThrough is events_stored_through: derived events at or below
	// it are not shown.
	StoredThrough int64
	// Attempts are the ended attempts: those moved to job_attempts first,
	// then the row's log.
	Attempts []AttemptRecord
}

// DeriveEvents is a job's whole history, ordered by sequence: the events
// its row holds (QUEUED, every attempt's LEASED and the events that ended
// it) merged with the stored ones. Where both have a sequence the stored
// event wins.
func DeriveEvents(row HistoryRow, stored []Event) []Event {
	j := row.Job
	out := make([]Event, 0, len(stored)+2+3*len(row.Attempts))
	add := func(seq int64, typ EventType, at time.Time, data string) {
		if seq <= row.StoredThrough || seq <= 0 {
			return
		}
		out = append(out, Event{JobID: j.ID, Sequence: seq, Type: typ, Time: at, Data: data})
	}
	avail := row.QueuedAvailableAt
	if avail.IsZero() {
		avail = j.CreatedAt
	}
	add(1, EventQueued, j.CreatedAt, eventJSON("queue", j.Queue, "available_at", avail))
	for _, r := range row.Attempts {
		add(r.LeasedSeq, EventLeased, r.ClaimedAt, leasedData(r.WorkerID, r.Generation, r.Attempt, r.LeasedUntil))
		for k, e := range AttemptEndEvents(r) {
			add(r.EndSeq+int64(k), e.Type, r.FinishedAt, e.Data)
		}
	}
	if j.State == JobStateLeased {
		add(row.LeasedSeq, EventLeased, j.LeasedAt, leasedData(j.LeaseOwner, j.LeaseGeneration, j.Attempts, row.LeasedUntil))
	}
	out = append(out, stored...)
	slices.SortStableFunc(out, func(a, b Event) int {
		switch {
		case a.Sequence < b.Sequence:
			return -1
		case a.Sequence > b.Sequence:
			return 1
		}
		return 0
	})
	// A stored event comes after a derived one of the same sequence (stable
	// sort, stored appended last) and replaces it.
	dedup := out[:0]
	for _, e := range out {
		if n := len(dedup); n > 0 && dedup[n-1].Sequence == e.Sequence {
			dedup[n-1] = e
			continue
		}
		dedup = append(dedup, e)
	}
	return dedup
}

// PageEvents is the page of evs (ordered by sequence) after sequence after,
// at most limit long.
func PageEvents(evs []Event, after int64, limit int) []Event {
	i, _ := slices.BinarySearchFunc(evs, after+1, func(e Event, seq int64) int {
		switch {
		case e.Sequence < seq:
			return -1
		case e.Sequence > seq:
			return 1
		}
		return 0
	})
	evs = evs[i:]
	if len(evs) > limit {
		evs = evs[:limit]
	}
	return evs
}

// leasedData is a LEASED event's data.
func leasedData(worker string, gen int64, attempt int32, until time.Time) string {
	return eventJSON("worker_id", worker, "lease_generation", gen, "attempt", attempt, "lease_expires_at", until)
}

// AttemptEndEvents are the events the end of the attempt r made, in order
// (the decisions of transition.go make the same ones: a test holds them
// together).
func AttemptEndEvents(r AttemptRecord) []NewEvent {
	tok := LeaseToken{Generation: r.Generation, WorkerID: r.WorkerID}
	ev := func(t EventType, kv ...any) NewEvent { return NewEvent{Type: t, Data: eventJSON(kv...)} }
	runFailed := func(e JobError, kv ...any) []any {
		return append(withError(holder(tok, "attempt", r.Attempt), e), kv...)
	}
	var e JobError
	if r.Error != nil {
		e = *r.Error
	}
	switch r.Outcome {
	case AttemptSucceeded:
		return []NewEvent{ev(EventSucceeded, holder(tok, "attempt", r.Attempt)...)}
	case AttemptFailed:
		switch r.State {
		case JobStateCancelled:
			return []NewEvent{ev(EventRunFailed, runFailed(e)...),
				ev(EventCancelled, holder(tok, "reason", r.CancelReason, "by", "retry")...)}
		case JobStateQueued:
			return []NewEvent{ev(EventRunFailed, runFailed(e, "available_at", r.RetryAt)...)}
		case JobStateFailed:
			return []NewEvent{ev(EventFailed, runFailed(e)...)}
		default:
			return []NewEvent{ev(EventRunFailed, runFailed(e)...), deadEvent(r.Attempt, r.MaxAttempts)}
		}
	case AttemptCancelled:
		if r.CancelBy == "release" {
			return []NewEvent{ev(EventCancelled, holder(tok, "by", "release")...)}
		}
		return []NewEvent{ev(EventCancelled, holder(tok, "reason", r.CancelReason, "by", "holder")...)}
	case AttemptReleased:
		return []NewEvent{ev(EventReleased, holder(tok)...)}
	case AttemptRunning:
		return nil // a running attempt has not ended
	case AttemptLeaseExpired:
		switch r.State {
		case JobStateCancelled:
			return []NewEvent{ev(EventCancelled, holder(tok, "reason", r.CancelReason, "lease_expired", true)...)}
		case JobStateDead:
			return []NewEvent{ev(EventLeaseExpired, holder(tok)...), ev(EventRunFailed, runFailed(LeaseExpiredError)...),
				deadEvent(r.Attempt, r.MaxAttempts)}
		default:
			return []NewEvent{ev(EventLeaseExpired, holder(tok)...)}
		}
	}
	return nil
}

// MergeAttempts merges the attempts of a row's log (and of the records
// moved out of it) into those an engine read from job_attempts and the
// running one, by generation (a generation in both is the log's).
func MergeAttempts(table, log []Attempt) []Attempt {
	if len(log) == 0 {
		return table
	}
	out := make([]Attempt, 0, len(table)+len(log))
	seen := make(map[int64]bool, len(log))
	for _, a := range log {
		seen[a.LeaseGeneration] = true
	}
	for _, a := range table {
		if !seen[a.LeaseGeneration] {
			out = append(out, a)
		}
	}
	out = append(out, log...)
	slices.SortStableFunc(out, func(a, b Attempt) int {
		switch {
		case a.LeaseGeneration < b.LeaseGeneration:
			return -1
		case a.LeaseGeneration > b.LeaseGeneration:
			return 1
		}
		return 0
	})
	return out
}

package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/store"
)

// Defaults and bounds of Config.
const (
	// BatchSizeDefault is how many rows one claim takes: the most one
	// BatchCreateJobs call accepts.
	BatchSizeDefault = store.BatchMaxItems
	// CallBytesMaxDefault bounds the encoded size of one BatchCreateJobs
	// request: the coordinator's default payload limit, well inside the
	// message size it accepts (that limit plus 1 MiB of headroom).
	CallBytesMaxDefault = outbox.PayloadMaxBytesDefault
	// WorkersDefault is how many claim loops run at once.
	WorkersDefault = 2
	// WorkersMax bounds Workers; each holds a database connection.
	WorkersMax = 64
	// PollIntervalDefault is the fallback poll when no notification came.
	PollIntervalDefault = time.Second
	// CallTimeoutDefault bounds one BatchCreateJobs call.
	CallTimeoutDefault = 30 * time.Second
	// StatsIntervalDefault is how often depth and ages are sampled.
	StatsIntervalDefault = 10 * time.Second
	// backoffMin and backoffMax bound the wait after a failed round.
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
	// finishTimeout bounds the DELETE and COMMIT after a successful call,
	// which run even when the relay is stopping (see finish).
	finishTimeout = 30 * time.Second
	// recvMsgMax bounds a BatchCreateJobs answer. The coordinator echoes
	// each job with its payload, so an answer is about as large as its
	// request, and a request may carry one row of up to the store's
	// payload limit: gRPC's default 4 MiB would refuse the answer to such
	// a row on every retry.
	recvMsgMax = 2*store.PayloadMaxBytes + 4<<20
	// stopGrace bounds how long a round in flight at Stop may take to
	// finish.
	stopGrace = 10 * time.Second
	// listenReconnectDelay is the wait before the LISTEN connection is
	// opened again after it dropped.
	listenReconnectDelay = time.Second
)

// Config configures a Relay. Source and Client are required; every other
// field has a default.
type Config struct {
	// Source is the database holding the outbox.
	Source *pgxpool.Pool
	// Client creates the jobs: a JobService client authenticated as a
	// producer of the tenant the jobs belong to.
	Client leaseholdv1.JobServiceClient
	// Schema is the outbox's schema. Default outbox.SchemaDefault.
	Schema string
	// BatchSize is the most rows one claim takes. Default (and at most)
	// BatchSizeDefault.
	BatchSize int
	// CallBytesMax bounds one BatchCreateJobs request's encoded size;
	// a claim is sent in as many calls as it needs. Default
	// CallBytesMaxDefault.
	CallBytesMax int
	// Workers is how many claim loops run at once. Default
	// WorkersDefault, at most WorkersMax.
	Workers int
	// PollInterval is how often a worker claims when no notification
	// woke it. Default PollIntervalDefault, at least 10ms.
	PollInterval time.Duration
	// CallTimeout bounds each BatchCreateJobs call. Default
	// CallTimeoutDefault.
	CallTimeout time.Duration
	// IdempotencyWindow is the coordinator's idempotency window: rows
	// older than half of it are reported. Default
	// store.IdempotencyWindowDefault.
	IdempotencyWindow time.Duration
	// StatsInterval is how often outbox depth and ages are sampled.
	// Default StatsIntervalDefault.
	StatsInterval time.Duration
	// Metrics receives the relay's measurements; nil means a private set
	// (NewMetrics(nil)).
	Metrics *Metrics
	// Logger; nil discards.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with defaults filled in.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, outbox.SchemaDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.CallBytesMax = cmp.Or(c.CallBytesMax, CallBytesMaxDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.CallTimeout = cmp.Or(c.CallTimeout, CallTimeoutDefault)
	c.IdempotencyWindow = cmp.Or(c.IdempotencyWindow, store.IdempotencyWindowDefault)
	c.StatsInterval = cmp.Or(c.StatsInterval, StatsIntervalDefault)
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks c's settings after WithDefaults (New also requires
// Source and Client).
func (c Config) Validate() error {
	var errs []error
	if err := outbox.ValidateSchemaName(c.Schema); err != nil {
		errs = append(errs, err)
	}
	if c.BatchSize < 1 || c.BatchSize > store.BatchMaxItems {
		errs = append(errs, fmt.Errorf("relay: BatchSize must be in [1, %d]", store.BatchMaxItems))
	}
	if c.CallBytesMax < 1024 || c.CallBytesMax > store.PayloadMaxBytes*2 {
		errs = append(errs, fmt.Errorf("relay: CallBytesMax must be in [1024, %d]", store.PayloadMaxBytes*2))
	}
	if c.Workers < 1 || c.Workers > WorkersMax {
		errs = append(errs, fmt.Errorf("relay: Workers must be in [1, %d]", WorkersMax))
	}
	if c.PollInterval < 10*time.Millisecond || c.PollInterval > time.Hour {
		errs = append(errs, errors.New("relay: PollInterval must be in [10ms, 1h]"))
	}
	if c.CallTimeout < 10*time.Millisecond || c.CallTimeout > 10*time.Minute {
		errs = append(errs, errors.New("relay: CallTimeout must be in [10ms, 10m]"))
	}
	if c.IdempotencyWindow < time.Minute || c.IdempotencyWindow > 365*24*time.Hour {
		errs = append(errs, errors.New("relay: IdempotencyWindow must be in [1m, 365d]"))
	}
	if c.StatsInterval < 10*time.Millisecond || c.StatsInterval > time.Hour {
		errs = append(errs, errors.New("relay: StatsInterval must be in [10ms, 1h]"))
	}
	return errors.Join(errs...)
}

// Relay moves outbox rows into Leasehold. Start runs it; Stop ends it.
type Relay struct {
	startstop.BaseStartStop

	cfg Config
	log *slog.Logger
	m   *Metrics
	q   queries

	// wake has one channel per worker (capacity 1): a notification sets
	// each, so a worker busy with a batch claims again when it is done.
	wake []chan struct{}

	// lastOK is when a worker last finished a round without error (unix
	// nanoseconds); lastErr the last round's error, nil after a success.
	lastOK  atomic.Int64
	lastErr atomic.Pointer[error]
}

// New returns a relay for cfg.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Source == nil || cfg.Client == nil {
		return nil, errors.New("relay: Source and Client are required")
	}
	r := &Relay{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, q: newQueries(cfg.Schema)}
	for range cfg.Workers {
		r.wake = append(r.wake, make(chan struct{}, 1))
	}
	return r, nil
}

// Start runs the listener, the workers and the stats loop until Stop or
// ctx ends. It returns at once.
func (r *Relay) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return
	}
	done := make(chan struct{}, r.cfg.Workers+2)
	go func() {
		started()
		defer stopped()
		go func() { r.listen(ctx); done <- struct{}{} }()
		go func() { r.statsLoop(ctx); done <- struct{}{} }()
		for i := range r.cfg.Workers {
			go func() { r.work(ctx, i); done <- struct{}{} }()
		}
		for range r.cfg.Workers + 2 {
			<-done
		}
	}()
}

// Healthy reports whether the relay works: its last round succeeded, and
// recently (within two poll intervals plus the time a round may take).
func (r *Relay) Healthy() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	last := r.lastOK.Load()
	if last == 0 {
		return errors.New("relay: no round finished yet")
	}
	if age := time.Since(time.Unix(0, last)); age > 2*r.cfg.PollInterval+r.cfg.CallTimeout+finishTimeout {
		return fmt.Errorf("relay: no round finished for %v", age.Round(time.Second))
	}
	return nil
}

// work is one claim loop: a round at once, then one per wake-up or poll;
// a full claim is followed by another at once, a failed one by a backoff.
func (r *Relay) work(ctx context.Context, i int) {
	// A round in flight when ctx ends (Stop, SIGTERM) may finish within
	// stopGrace: its jobs may exist already, and deleting its rows now
	// spares the next relay a replay. Past that it is cancelled; its rows
	// stay and are sent again, idempotently.
	roundCtx, cancelRound := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRound()
	stopAfter := context.AfterFunc(ctx, func() {
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-grace.C:
			cancelRound()
		case <-roundCtx.Done(): // the worker has returned
		}
	})
	defer stopAfter()
	backoff := time.Duration(0)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake := r.wake[i]
		if backoff > 0 {
			// Backing off: notifications (every insert sends one) must
			// not turn the backoff into a retry per insert.
			wake = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		res, err := r.RunOnce(roundCtx)
		next := r.cfg.PollInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.lastErr.Store(&err)
			backoff = min(max(2*backoff, backoffMin), backoffMax)
			next = backoff
			r.m.errors.Inc()
			r.log.WarnContext(ctx, "outbox relay round failed; retrying", slog.Int("worker", i),
				slog.Duration("retry_in", backoff), slog.String("error", err.Error()))
		default:
			r.lastErr.Store(nil)
			r.lastOK.Store(time.Now().UnixNano())
			backoff = 0
			if res.Claimed == r.cfg.BatchSize {
				next = 0
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// Result is what one round did.
type Result struct {
	// Claimed rows, Relayed (now jobs, and deleted) and Dead (moved to
	// outbox_dead). Claimed - Relayed - Dead stayed for a later round.
	Claimed, Relayed, Dead int
}

// item is one claimed row and its request.
type item struct {
	id   int64
	req  *leaseholdv1.CreateJobRequest
	size int
}

type deadItem struct {
	item *item
	code string
	msg  string
}

// RunOnce claims one batch, delivers it and commits. It returns the
// delivery error when a call failed for a reason that may pass (the rows
// it did not deliver stay); refused rows are not an error.
func (r *Relay) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	tx, err := r.cfg.Source.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("relay: begin: %w", err)
	}
	defer func() {
		// The rollback must run even when ctx is done, or the claimed
		// rows stay locked until the connection is reset.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	items, err := r.claim(ctx, tx)
	if err != nil {
		return res, err
	}
	res.Claimed = len(items)
	if len(items) == 0 {
		return res, tx.Commit(ctx)
	}
	var (
		ok      []*item
		dead    []deadItem
		sendErr error
	)
	for _, group := range r.groups(items) {
		o, d, err := r.send(ctx, group)
		ok, dead = append(ok, o...), append(dead, d...)
		if err != nil {
			sendErr = err
			break
		}
	}
	if err := r.finish(ctx, tx, ok, dead); err != nil {
		return res, err
	}
	res.Relayed, res.Dead = len(ok), len(dead)
	r.m.relayed.Add(float64(len(ok)))
	r.m.deadTotal.Add(float64(len(dead)))
	for _, d := range dead {
		r.log.WarnContext(ctx, "outbox row refused by the coordinator; moved to outbox_dead",
			slog.Int64("outbox_id", d.item.id), slog.String("request_id", d.item.req.GetRequestId()),
			slog.String("code", d.code), slog.String("error", d.msg))
	}
	return res, sendErr
}

func (r *Relay) claim(ctx context.Context, tx pgx.Tx) ([]*item, error) {
	rows, err := tx.Query(ctx, r.q.claim, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("relay: claim: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*item, error) {
		var (
			it    item
			spec  leaseholdv1.JobSpec
			reqID string
			runAt *time.Time
			key   *string
		)
		if err := row.Scan(&it.id, &reqID, &spec.Queue, &spec.Kind, &spec.Payload, &spec.Metadata,
			&spec.Priority, &runAt, &spec.MaxAttempts, &spec.Dependency, &spec.ConcurrencyKey, &key); err != nil {
			return nil, err
		}
		if len(spec.GetMetadata()) == 0 {
			spec.Metadata = nil
		}
		if runAt != nil {
			spec.RunAt = timestamppb.New(*runAt)
		}
		it.req = &leaseholdv1.CreateJobRequest{Job: &spec, RequestId: reqID}
		if key != nil {
			// A duplicate is delivered: the job it answers exists.
			it.req.Unique = &leaseholdv1.UniqueOptions{Key: *key}
		}
		it.size = proto.Size(it.req)
		return &it, nil
	})
	if err != nil {
		return nil, fmt.Errorf("relay: claim: %w", err)
	}
	return items, nil
}

// groups splits items into calls of at most CallBytesMax encoded bytes
// (a row larger than that goes alone).
func (r *Relay) groups(items []*item) [][]*item {
	var (
		out   [][]*item
		start int
		size  int
	)
	for i, it := range items {
		// Each repeated element costs its size plus a tag and a length.
		n := it.size + 8
		if i > start && size+n > r.cfg.CallBytesMax {
			out = append(out, items[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, items[start:])
}

// send delivers items. It returns the delivered items, the refused ones
// with their errors, and an error that may pass, which ends the round:
// the items neither delivered nor refused stay in the outbox.
func (r *Relay) send(ctx context.Context, items []*item) (ok []*item, dead []deadItem, err error) {
	err = r.call(ctx, items)
	switch {
	case err == nil:
		return items, nil, nil
	case !refusedForGood(err):
		return nil, nil, err
	case len(items) == 1:
		st := status.Convert(err)
		return nil, []deadItem{{item: items[0], code: st.Code().String(), msg: st.Message()}}, nil
	}
	if i, named := namedRequest(err); named && i < len(items) {
		// The refusal names the row: set it aside, send the rest.
		rest := append(append(make([]*item, 0, len(items)-1), items[:i]...), items[i+1:]...)
		st := status.Convert(err)
		ok, dead, err = r.send(ctx, rest)
		return ok, append(dead, deadItem{item: items[i], code: st.Code().String(), msg: st.Message()}), err
	}
	half := len(items) / 2
	ok, dead, err = r.send(ctx, items[:half])
	if err != nil {
		return ok, dead, err
	}
	ok2, dead2, err := r.send(ctx, items[half:])
	return append(ok, ok2...), append(dead, dead2...), err
}

func (r *Relay) call(ctx context.Context, items []*item) error {
	reqs := make([]*leaseholdv1.CreateJobRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	resp, err := r.cfg.Client.BatchCreateJobs(cctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs},
		grpc.MaxCallRecvMsgSize(recvMsgMax))
	if err != nil {
		return err
	}
	if len(resp.GetResponses()) != len(reqs) {
		return fmt.Errorf("relay: BatchCreateJobs answered %d of %d requests", len(resp.GetResponses()), len(reqs))
	}
	return nil
}

// refusedForGood reports whether the coordinator refused a call for a
// reason that sending it again cannot change.
func refusedForGood(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.PermissionDenied, codes.OutOfRange:
		return true
	case codes.OK, codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.NotFound,
		codes.ResourceExhausted, codes.FailedPrecondition, codes.Aborted, codes.Unimplemented,
		codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unauthenticated:
		// May pass: the coordinator or the network is down or busy, or
		// the relay's credential is wrong — a fault of the relay, never
		// a row's, so no row is set aside for it.
		return false
	}
	return false
}

var requestIndex = regexp.MustCompile(`^requests\[(\d+)\]`)

// namedRequest returns the index of the request a refusal's field
// violation names (requests[i].…), if it names one.
func namedRequest(err error) (int, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			if m := requestIndex.FindStringSubmatch(v.GetField()); m != nil {
				if i, err := strconv.Atoi(m[1]); err == nil {
					return i, true
				}
			}
		}
	}
	return 0, false
}

// finish deletes the delivered rows, moves the refused ones to
// outbox_dead and commits. The jobs exist already, so it runs even when
// ctx ends (a stopping relay): detached, bounded by finishTimeout. Should
// it fail anyway, the rows are sent again later and come back as
// replays.
func (r *Relay) finish(ctx context.Context, tx pgx.Tx, ok []*item, dead []deadItem) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if len(ok) > 0 {
		ids := make([]int64, len(ok))
		for i, it := range ok {
			ids[i] = it.id
		}
		rows, err := tx.Query(ctx, r.q.remove, ids)
		if err != nil {
			return fmt.Errorf("relay: delete relayed rows: %w", err)
		}
		lags, err := pgx.CollectRows(rows, pgx.RowTo[float64])
		if err != nil {
			return fmt.Errorf("relay: delete relayed rows: %w", err)
		}
		for _, l := range lags {
			r.m.lag.Observe(l)
		}
	}
	if len(dead) > 0 {
		ids := make([]int64, len(dead))
		codes := make([]string, len(dead))
		msgs := make([]string, len(dead))
		for i, d := range dead {
			ids[i], codes[i], msgs[i] = d.item.id, d.code, truncate(d.msg, store.ErrorMessageMaxLen)
		}
		if _, err := tx.Exec(ctx, r.q.bury, ids, codes, msgs); err != nil {
			return fmt.Errorf("relay: move refused rows to outbox_dead: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("relay: commit: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// listen wakes every worker on each notification, and once each time
// LISTEN becomes active (notifications may have been missed while it was
// not).
func (r *Relay) listen(ctx context.Context) {
	connCfg := r.cfg.Source.Config().ConnConfig
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, connCfg.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() != nil {
				return // stopping
			}
			r.log.WarnContext(ctx, "outbox relay: LISTEN connection failed; polling meanwhile", slog.String("error", err.Error()))
		},
		ReconnectDelay: listenReconnectDelay,
	}
	l.Handle(outbox.Channel(r.cfg.Schema), waker{r})
	_ = l.Listen(ctx) // returns once ctx is done; it retries every other error
}

type waker struct{ r *Relay }

func (w waker) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	w.r.wakeAll()
	return nil
}

func (w waker) HandleBacklog(context.Context, string, *pgx.Conn) error {
	w.r.wakeAll()
	return nil
}

func (r *Relay) wakeAll() {
	for _, ch := range r.wake {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
	}
}

// statsLoop samples the outbox every StatsInterval.
func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := r.SampleStats(ctx); err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "outbox relay: stats query failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stats is one sample of the outbox.
type Stats struct {
	// Depth is how many rows wait; Oldest the age of the oldest.
	Depth  int64
	Oldest time.Duration
	// Stale counts rows older than half the idempotency window.
	Stale int64
	// Dead counts rows in outbox_dead.
	Dead int64
}

// SampleStats reads the outbox's depth and ages into the metrics, and
// logs a warning when rows are older than half the idempotency window:
// past the whole window, relaying such a row could create a second job.
func (r *Relay) SampleStats(ctx context.Context) error {
	s, err := r.Stats(ctx)
	if err != nil {
		return err
	}
	r.m.depth.Set(float64(s.Depth))
	r.m.oldest.Set(s.Oldest.Seconds())
	r.m.stale.Set(float64(s.Stale))
	r.m.deadRows.Set(float64(s.Dead))
	if s.Stale > 0 {
		r.log.WarnContext(ctx, "outbox rows are older than half the idempotency window: relay them soon, or they may become duplicate jobs",
			slog.Int64("stale_rows", s.Stale), slog.Duration("oldest", s.Oldest.Round(time.Second)),
			slog.Duration("idempotency_window", r.cfg.IdempotencyWindow))
	}
	return nil
}

// Stats reads one sample.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	var (
		s      Stats
		oldest float64
	)
	half := r.cfg.IdempotencyWindow / 2
	err := r.cfg.Source.QueryRow(ctx, r.q.stats, half.Seconds()).Scan(&s.Depth, &oldest, &s.Stale, &s.Dead)
	if err != nil {
		return s, fmt.Errorf("relay: stats: %w", err)
	}
	s.Oldest = time.Duration(oldest * float64(time.Second))
	return s, nil
}

package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// notifyChannel is the LISTEN/NOTIFY channel of the public schema.
const notifyChannel = "leasehold_jobs"

// channelFor is the channel of the stores working in schema. Channels are
// database-wide while Leasehold's tables live in one schema, so each other
// schema gets a channel of its own (named by a hash, since channel names
// are limited to 63 bytes): deployments or tests side by side in one
// database never wake each other.
func channelFor(schema string) string {
	if schema == "" || schema == "public" {
		return notifyChannel
	}
	return fmt.Sprintf("%s_%08x", notifyChannel, crc32.ChecksumIEEE([]byte(schema)))
}

// Payloads. Every payload ends with its kind after the last separator:
//
//	job wake-up:  tenant 0x1f queue
//	other kinds:  body 0x1f 0x1e kind
//
// The job wake-up is the format from before there were kinds (coordinators
// of both versions share the channel during a rolling upgrade); its last
// part is a queue name, which never starts with the kind mark, so the two
// shapes cannot be confused whatever a tenant contains. A coordinator
// ignores kinds it does not know.
const (
	notifySeparator = "\x1f"
	notifyKindMark  = "\x1e"
)

// subscriberBuffer is how many wake-ups a slow subscriber may have pending
// before new ones are dropped (they are hints; dispatchers also poll).
const subscriberBuffer = 256

// listenReconnectDelay is how long a listener whose connection dropped (or
// could not be opened) waits before it connects again. Notifications sent
// meanwhile are lost; dispatchers poll, so a wake-up is late, not missed.
// One attempt a second per coordinator is cheap for a database that is
// back, and quick enough that streams seldom wait for a poll.
const listenReconnectDelay = time.Second

func encodeNotification(tenant, queue string) string {
	return tenant + notifySeparator + queue
}

// notification is one decoded payload; exactly one field is set.
//
// Adding a kind (the queue-policy and breaker invalidations, say): a field
// here, a case in decodeNotification for its kind name, a case in
// listener.deliver that hands it to its subscribers, and a sender that
// writes body + notifySeparator + notifyKindMark + kind.
type notification struct {
	// jobs: jobs became available in this queue (created, rescheduled,
	// released).
	jobs *store.QueueRef
}

// decodeNotification decodes a payload; ok is false for a malformed one
// or a kind this version does not know.
func decodeNotification(payload string) (_ notification, ok bool) {
	i := strings.LastIndex(payload, notifySeparator)
	if i < 0 {
		return notification{}, false
	}
	body, last := payload[:i], payload[i+len(notifySeparator):]
	kind, tagged := strings.CutPrefix(last, notifyKindMark)
	if !tagged {
		ref := store.QueueRef{Tenant: body, Queue: last}
		if ref.Tenant == "" || !store.ValidName(ref.Queue) {
			return notification{}, false
		}
		return notification{jobs: &ref}, true
	}
	switch kind { //nolint:gocritic // the place where a new kind decodes body; this version knows none
	// A new kind decodes body here (see notification).
	default:
		return notification{}, false // a newer coordinator's kind
	}
}

// changeChannelFor is the channel of job changes of the stores working in
// schema: what the trigger of migration 008 computes from the schema's
// name.
func changeChannelFor(schema string) string {
	sum := md5.Sum([]byte(schema))
	return "leasehold_changes_" + hex.EncodeToString(sum[:])[:8]
}

// changeBuffer is how many job changes a subscriber may have pending
// before it is told it lost some (it then re-reads every watched job).
const changeBuffer = 4096

// decodeChange decodes a change payload: tenant 0x1f job_id. A tenant may
// hold the separator; a job id (a UUID) never does, so the last one
// decides.
func decodeChange(payload string) (store.JobRef, bool) {
	i := strings.LastIndex(payload, notifySeparator)
	if i <= 0 || i == len(payload)-len(notifySeparator) {
		return store.JobRef{}, false
	}
	return store.JobRef{Tenant: payload[:i], ID: payload[i+len(notifySeparator):]}, true
}

// errStoreClosed is returned by SubscribeJobs after Close.
var errStoreClosed = errors.New("postgres store is closed")

// SubscribeJobs implements store.JobNotifier. It returns once LISTEN is
// active, so a job created after it returns is always seen (unless the
// connection drops: notifications sent while the listener reconnects are
// lost, which dispatchers cover by polling), or with the error of the
// first attempt. The channel closes when ctx is done or the store is
// closed.
func (s *Store) SubscribeJobs(ctx context.Context) (<-chan store.QueueRef, error) {
	l := s.newListener(s.channel)
	l.jobs = make(chan store.QueueRef, subscriberBuffer)
	if err := s.startListener(ctx, l, "subscribe_jobs"); err != nil {
		return nil, err
	}
	return l.jobs, nil
}

// SubscribeJobChanges implements store.JobChangeNotifier over the change
// channel the trigger of migration 008 notifies, with one LISTEN
// connection per subscription (a coordinator makes one and fans it out to
// its watchers). It returns once LISTEN is active.
func (s *Store) SubscribeJobChanges(ctx context.Context) (store.JobChanges, error) {
	l := s.newListener(s.changeChannel)
	l.changes = make(chan store.JobRef, changeBuffer)
	l.lost = make(chan struct{}, 1)
	if err := s.startListener(ctx, l, "subscribe_job_changes"); err != nil {
		return store.JobChanges{}, err
	}
	return store.JobChanges{Jobs: l.changes, Lost: l.lost}, nil
}

// AnnounceWatchers implements store.JobChangeNotifier.
func (s *Store) AnnounceWatchers(ctx context.Context, id string, ttl time.Duration) error {
	if id == "" || ttl <= 0 {
		return store.Invalid("id", "an id and a positive ttl are required")
	}
	if _, err := s.pool.Exec(ctx, qAnnounceWatchers, id, ttl); err != nil {
		return s.readError(ctx, "announce_watchers", err)
	}
	return nil
}

// WithdrawWatchers implements store.JobChangeNotifier.
func (s *Store) WithdrawWatchers(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, qWithdrawWatchers, id); err != nil {
		return s.readError(ctx, "withdraw_watchers", err)
	}
	return nil
}

func (s *Store) newListener(channel string) *listener {
	return &listener{
		channel: channel,
		connect: func(ctx context.Context) (*pgx.Conn, error) {
			// Outside the pool: a LISTEN must not go back to it.
			return pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
		},
		log:       s.logger,
		listening: make(chan struct{}),
		firstErr:  make(chan error, 1),
	}
}

// startListener registers l, starts it and waits until it listens (or
// failed its first attempt, or ctx ended, or the store closed).
func (s *Store) startListener(ctx context.Context, l *listener, op string) error {
	s.listenersMu.Lock()
	if s.closed {
		s.listenersMu.Unlock()
		return errStoreClosed
	}
	s.listeners[l] = struct{}{}
	s.listenersMu.Unlock()
	l.onStop = func() {
		s.listenersMu.Lock()
		defer s.listenersMu.Unlock()
		delete(s.listeners, l)
	}

	l.Start(ctx)
	select {
	case <-l.listening:
		return nil
	case err := <-l.firstErr:
		l.Stop()
		return s.readError(ctx, op, err)
	case <-l.Stopped():
		if err := ctx.Err(); err != nil {
			return err
		}
		return errStoreClosed
	}
}

// stopListeners stops every subscription's listener and waits for them.
func (s *Store) stopListeners() {
	s.listenersMu.Lock()
	s.closed = true
	ls := make([]*listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	s.listenersMu.Unlock()
	// Not under listenersMu: a stopping listener takes it to unregister.
	for _, l := range ls {
		l.Stop()
	}
}

// listener is one subscription's LISTEN connection: a startstop service
// around pgxlisten.Listener, which connects, LISTENs, hands each
// notification to HandleNotification and reconnects after
// listenReconnectDelay when the connection drops. It runs once.
type listener struct {
	startstop.BaseStartStop

	channel string
	connect func(context.Context) (*pgx.Conn, error)
	log     *slog.Logger
	// jobs is the subscriber's channel of a SubscribeJobs listener;
	// closed when the listener stops.
	jobs chan store.QueueRef
	// changes and lost are the channels of a SubscribeJobChanges listener
	// (jobs is nil then); closed when the listener stops.
	changes chan store.JobRef
	lost    chan struct{}
	// listening is closed once LISTEN is first active; firstErr gets the
	// failure of an attempt before that (SubscribeJobs returns it).
	listening chan struct{}
	firstErr  chan error
	// onStop unregisters the listener from its store.
	onStop func()

	// failing is whether the connection is down and that was logged.
	// Only the Listen goroutine (which calls every hook) touches it.
	failing bool
	// quiet is whether that outage was the database's (logged at Debug,
	// since the readiness probe reports it), so its end is Debug too.
	quiet bool
}

var (
	_ startstop.Service        = (*listener)(nil)
	_ pgxlisten.BacklogHandler = (*listener)(nil)
)

// Start runs the listener until Stop or ctx ends.
func (l *listener) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := l.StartInit(ctx)
	if !shouldStart {
		return
	}
	pl := &pgxlisten.Listener{
		Connect:        l.connect,
		LogError:       l.logError,
		ReconnectDelay: listenReconnectDelay,
	}
	pl.Handle(l.channel, l)
	go func() {
		started()
		defer stopped()
		defer l.onStop()
		defer l.closeChannels()
		_ = pl.Listen(ctx) // returns only once ctx is done; it retries every other error
	}()
}

// closeChannels closes the subscriber's channels.
func (l *listener) closeChannels() {
	if l.jobs != nil {
		close(l.jobs)
	}
	if l.changes != nil {
		close(l.changes)
		close(l.lost)
	}
}

// HandleBacklog is called each time LISTEN has become active on a new
// connection. There is no backlog to read (a wake-up is a hint, and the
// dispatchers poll for what was missed); it marks the listener as
// listening. A change listener that was down tells its subscriber that
// changes may have been lost meanwhile.
func (l *listener) HandleBacklog(ctx context.Context, _ string, _ *pgx.Conn) error {
	select {
	case <-l.listening:
		if l.failing {
			l.failing = false
			level := slog.LevelInfo
			if l.quiet {
				level = slog.LevelDebug
			}
			l.log.Log(ctx, level, "job notification listener is listening again")
			l.signalLost()
		}
	default:
		close(l.listening)
	}
	return nil
}

// HandleNotification decodes a payload and delivers it.
func (l *listener) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	if l.changes != nil {
		if ref, ok := decodeChange(n.Payload); ok {
			select {
			case l.changes <- ref:
			default: // behind: the subscriber re-reads everything it watches
				l.signalLost()
			}
		}
		return nil
	}
	if msg, ok := decodeNotification(n.Payload); ok {
		l.deliver(msg)
	}
	return nil
}

// signalLost tells a change subscriber that changes may have been missed.
func (l *listener) signalLost() {
	if l.lost == nil {
		return
	}
	select {
	case l.lost <- struct{}{}:
	default: // one pending signal is enough
	}
}

// deliver hands a notification to the subscribers of its kind without
// blocking: the Listen goroutine must keep reading the connection.
func (l *listener) deliver(n notification) {
	if n.jobs != nil {
		select {
		case l.jobs <- *n.jobs:
		default: // the subscriber is behind; wake-ups are hints
		}
	}
}

// logError receives pgxlisten's errors: a connection that failed or
// dropped (retried after listenReconnectDelay). Before the first LISTEN
// the error goes to SubscribeJobs; after it, an outage is logged at Warn
// once and each further failed attempt at Debug.
func (l *listener) logError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping
	}
	select {
	case <-l.listening:
	default:
		select {
		case l.firstErr <- err:
		default:
		}
		return
	}
	if !l.failing {
		l.failing = true
		l.quiet = errors.Is(interpretError(err), store.ErrUnreachable)
		level := slog.LevelWarn
		if l.quiet {
			level = slog.LevelDebug // the database is down: the readiness probe reports it
		}
		l.log.Log(ctx, level, "job notification listener lost its connection; reconnecting",
			slog.Any("error", interpretError(err)), slog.Duration("retry_in", listenReconnectDelay))
		return
	}
	l.log.DebugContext(ctx, "job notification listener cannot reconnect yet",
		slog.Any("error", interpretError(err)), slog.Duration("retry_in", listenReconnectDelay))
}

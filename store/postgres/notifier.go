package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// notifyChannel is the LISTEN/NOTIFY channel of job wake-ups in the public
// schema. A payload is tenant + "\x1f" + queue; queue names cannot contain
// the separator, so the last one splits it even if a tenant does.
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

const notifySeparator = "\x1f"

// subscriberBuffer is how many wake-ups a slow subscriber may have pending
// before new ones are dropped (they are hints; dispatchers also poll).
const subscriberBuffer = 256

// Listener reconnection backoff.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

func encodeNotification(tenant, queue string) string {
	return tenant + notifySeparator + queue
}

func decodeNotification(payload string) (store.QueueRef, bool) {
	i := strings.LastIndex(payload, notifySeparator)
	if i < 0 {
		return store.QueueRef{}, false
	}
	ref := store.QueueRef{Tenant: payload[:i], Queue: payload[i+len(notifySeparator):]}
	if ref.Tenant == "" || !store.ValidName(ref.Queue) {
		return store.QueueRef{}, false
	}
	return ref, true
}

// errStoreClosed is returned by SubscribeJobs after Close.
var errStoreClosed = errors.New("postgres store is closed")

// SubscribeJobs implements store.JobNotifier. It returns once LISTEN is
// active, so a job created after it returns is always seen (unless the
// connection drops: notifications sent while the listener reconnects are
// lost, which dispatchers cover by polling). The channel closes when ctx is
// done or the store is closed.
func (s *Store) SubscribeJobs(ctx context.Context) (<-chan store.QueueRef, error) {
	conn, err := s.listen(ctx)
	if err != nil {
		return nil, s.readError(ctx, "subscribe_jobs", err)
	}
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	if s.closed {
		closeConn(conn)
		return nil, errStoreClosed
	}
	ch := make(chan store.QueueRef, subscriberBuffer)
	s.listeners.Add(1)
	go s.runListener(ctx, conn, ch)
	return ch, nil
}

// listen opens a connection outside the pool (a LISTEN must not go back to
// the pool) and subscribes it to the store's channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	if s.onListen != nil {
		s.onListen(conn.PgConn().PID())
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	// The caller's ctx may be done; closing must still send Terminate.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// runListener forwards notifications until ctx is done or the store
// closes, reconnecting with exponential backoff when the connection drops.
func (s *Store) runListener(ctx context.Context, conn *pgx.Conn, ch chan<- store.QueueRef) {
	defer s.listeners.Done()
	defer close(ch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.closeCtx, cancel)
	defer stop()

	backoff := listenBackoffMin
	for {
		for conn != nil {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				closeConn(conn)
				conn = nil
				if ctx.Err() != nil {
					return
				}
				s.logger.WarnContext(ctx, "job notification listener lost its connection; reconnecting",
					slog.Any("error", interpretError(err)))
				break
			}
			backoff = listenBackoffMin
			ref, ok := decodeNotification(n.Payload)
			if !ok {
				continue
			}
			select {
			case ch <- ref:
			default: // the subscriber is behind; wake-ups are hints
			}
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
		c, err := s.listen(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.WarnContext(ctx, "job notification listener cannot reconnect",
				slog.Any("error", interpretError(err)), slog.Duration("retry_in", backoff))
			continue
		}
		conn = c
	}
}

package postgres

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// handoff is what a create batch's claims (store.HandoffCreator) need
// across its passes: the claims that may run, the queues whose job
// notifications wait for them (deferred), and the ids of the jobs created
// in those queues (fresh).
type handoff struct {
	claims   []callClaim
	deferred map[store.QueueRef]bool
	fresh    map[store.QueueRef][]string
}

// callClaim is one claim of a call of the batch.
type callClaim struct {
	call  int
	claim store.ClaimManyParams
}

// newHandoff is the batch's handoff, or nil when no call has a claim that
// may run.
func newHandoff(calls []createCall, policies map[store.QueueRef]store.QueuePolicy) *handoff {
	var h *handoff
	for ci, c := range calls {
		for _, cl := range c.handoff {
			if !handoffOpen(cl, policies) {
				continue
			}
			if h == nil {
				h = &handoff{deferred: map[store.QueueRef]bool{}, fresh: map[store.QueueRef][]string{}}
			}
			h.claims = append(h.claims, callClaim{call: ci, claim: cl})
			for _, q := range cl.Queues {
				h.deferred[store.QueueRef{Tenant: cl.Tenant, Queue: q}] = true
			}
		}
	}
	return h
}

// defers reports whether the notification of q waits for the claims.
func (h *handoff) defers(q store.QueueRef) bool { return h != nil && h.deferred[q] }

// handoffOpen reports whether claim may run in the create's transaction:
// every queue's policy is at hand (the batch's queues are) and allows it.
func handoffOpen(claim store.ClaimManyParams, policies map[store.QueueRef]store.QueuePolicy) bool {
	for _, q := range claim.Queues {
		pol, ok := policies[store.QueueRef{Tenant: claim.Tenant, Queue: q}]
		if !ok || !store.HandoffAllowed(pol) {
			return false
		}
	}
	return true
}

// runHandoff runs the calls' claims after every insert of the batch, and
// then the deferred notifications (only for queues where a created job is
// still QUEUED), in one round trip after a savepoint. A claim that fails
// rolls back to the savepoint: the creates commit without leases, and
// their queues are notified as usual.
func (s *Store) runHandoff(ctx context.Context, tx *lazyTx,
	policies map[store.QueueRef]store.QueuePolicy, h *handoff, out []createAnswer) error {
	if h == nil {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(qSavepointHandoff)
	var runs []int // the call of each claim queued
	for _, c := range h.claims {
		if out[c.call].err != nil {
			continue // the call failed: nothing of it is created
		}
		queues := slices.Compact(slices.Sorted(slices.Values(c.claim.Queues)))
		owners, leases := claimSlotArgs(c.claim)
		if query, args := claimArgs(c.claim, queues, policies, nil, owners, leases, ""); query != "" {
			b.Queue(query, args...)
			runs = append(runs, c.call)
		}
	}
	refs := slices.SortedFunc(maps.Keys(h.fresh), compareRefs)
	for _, q := range refs {
		b.Queue(qNotifyIfQueued, s.channel, encodeNotification(q.Tenant, q.Queue), q.Tenant, h.fresh[q])
	}
	err := s.sendHandoff(ctx, tx, b, runs, len(refs), out)
	if err == nil || ctx.Err() != nil {
		return err
	}
	s.logger.WarnContext(ctx, "handoff claim failed; the jobs are created and left to dispatch", slog.Any("error", err))
	for i := range out {
		out[i].leased = nil
	}
	// Alone: until it runs, the aborted transaction refuses even to
	// prepare another statement.
	if _, err := tx.Exec(ctx, qRollbackToHandoff); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	b = &pgx.Batch{}
	for _, q := range refs {
		b.Queue(qNotify, s.channel, encodeNotification(q.Tenant, q.Queue))
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range refs {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// sendHandoff sends b (the savepoint, the claims of runs, then notifies
// notifications) and gives each call its leased rows.
func (s *Store) sendHandoff(ctx context.Context, tx *lazyTx, b *pgx.Batch, runs []int, notifies int, out []createAnswer) error {
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	for _, ci := range runs {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		recs, err := collect(rows, func(r pgx.Row) (*jobRecord, error) { return scanJob(r) })
		if err != nil {
			return err
		}
		out[ci].leased = append(out[ci].leased, recs...)
	}
	for range notifies {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

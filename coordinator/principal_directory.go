package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Bounds of the principal directory.
const (
	// principalsMax is the most principals the directory holds. A
	// database with more still works: a key the directory does not hold
	// is then looked up in the store (one query per unknown key, as
	// without a directory), and the coordinator logs a warning.
	principalsMax = 100_000
	// principalMissRefresh is the least time between two reloads caused
	// by a key the directory does not know: a key created through
	// another coordinator works here within about this long, and a flood
	// of unknown keys costs at most one query per interval, however many
	// distinct keys it tries.
	principalMissRefresh = 500 * time.Millisecond
	// principalLoadTimeout bounds one reload (it runs apart from the
	// call that started it, which may be cancelled meanwhile).
	principalLoadTimeout = 10 * time.Second
	// principalLoadRetry is how long a failed reload is remembered:
	// calls meanwhile get its error instead of each trying again while
	// the store is unreachable.
	principalLoadRetry = 200 * time.Millisecond
)

// principalDirectory holds every valid principal in memory, read from the
// store in one query, so that authentication is a map lookup: a wrong or
// unknown key costs no store query, however many are tried.
//
// Freshness: a lookup is answered from the list while it is younger than
// ttl (half the auth cache TTL): a key revoked through another coordinator
// stops working here within ttl. A key the list lacks waits for a reload
// (see find), so a key created through another coordinator works on its
// first use. Changes made through this coordinator (create, revoke)
// invalidate the list at once. A reload is done once for every caller
// waiting on it (single flight).
type principalDirectory struct {
	ttl  time.Duration
	load func(ctx context.Context, limit int) ([]store.Principal, error)
	// lookupKey is the store lookup for a key the list lacks when the
	// list is truncated (more than principalsMax principals).
	lookupKey func(ctx context.Context, hash []byte) (*store.Principal, error)
	log       *slog.Logger
	now       func() time.Time

	// mu guards the fields below.
	mu        sync.Mutex
	byKey     map[string]*store.Principal // by string(KeyHash)
	byCert    map[string]*store.Principal // by CertSubject
	truncated bool
	loadedAt  time.Time // zero: never loaded, or invalidated
	loading   chan struct{}
	loadErr   error
	failedAt  time.Time
	// gen counts invalidations: a reload that began before one does not
	// count as fresh.
	gen int
	// loads counts reloads (tests).
	loads int
}

// newPrincipalDirectory answers from a list at most half the auth cache
// TTL old: a key revoked through another coordinator stops working here
// within about a second with the default TTL (2s), and streams, which
// re-check every TTL, within 1.5 TTL.
func newPrincipalDirectory(cacheTTL time.Duration, st store.Store, log *slog.Logger) *principalDirectory {
	return &principalDirectory{
		ttl: max(cacheTTL/2, principalMissRefresh), load: st.ValidPrincipals, lookupKey: st.PrincipalByKeyHash, log: log, now: time.Now,
	}
}

// errNoPrincipal is the directory's "no valid principal": the same answer
// for unknown and revoked.
var errNoPrincipal = fmt.Errorf("principal: %w", store.ErrNotFound)

// byKeyHash returns the valid principal of an API key's hash, or
// errNoPrincipal.
func (d *principalDirectory) byKeyHash(ctx context.Context, hash []byte) (*store.Principal, error) {
	p, truncated, err := d.find(ctx, func() *store.Principal { return d.byKey[string(hash)] })
	if err != nil || p != nil {
		return p, err
	}
	if truncated {
		p, err := d.lookupKey(ctx, hash)
		if err != nil {
			return nil, err
		}
		if p.Revoked() {
			return nil, errNoPrincipal
		}
		return p, nil
	}
	return nil, errNoPrincipal
}

// byCertSubject returns the valid principal of a certificate subject, or
// errNoPrincipal.
func (d *principalDirectory) byCertSubject(ctx context.Context, subject string) (*store.Principal, error) {
	p, _, err := d.find(ctx, func() *store.Principal { return d.byCert[subject] })
	if err != nil || p != nil {
		return p, err
	}
	// Certificate principals are few; the list holds them first.
	return nil, errNoPrincipal
}

// find answers get from a fresh enough list, reloading it when needed.
// A miss waits for a reload that starts at least principalMissRefresh
// after the last one, so that a key created anywhere works on its first
// use, and unknown keys cost one query per interval all told (and each
// waits up to that long for its refusal, which slows guessing down).
func (d *principalDirectory) find(ctx context.Context, get func() *store.Principal) (p *store.Principal, truncated bool, err error) {
	reloaded := false
	for {
		d.mu.Lock()
		now := d.now()
		if !d.loadedAt.IsZero() && now.Sub(d.loadedAt) < d.ttl {
			if p := get(); p != nil || reloaded {
				t := d.truncated
				d.mu.Unlock()
				return p, t, nil
			}
			if wait := d.loadedAt.Add(principalMissRefresh).Sub(now); wait > 0 && d.loading == nil {
				d.mu.Unlock()
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil, false, ctx.Err()
				}
				continue
			}
		}
		if d.loadErr != nil && now.Sub(d.failedAt) < principalLoadRetry {
			err := d.loadErr
			d.mu.Unlock()
			return nil, false, err
		}
		wait := d.loading
		if wait == nil {
			wait = make(chan struct{})
			d.loading = wait
			go d.reload(context.WithoutCancel(ctx), wait, d.gen)
		}
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		reloaded = true
	}
}

// reload reads the list and closes done.
func (d *principalDirectory) reload(ctx context.Context, done chan struct{}, gen int) {
	ctx, cancel := context.WithTimeout(ctx, principalLoadTimeout)
	defer cancel()
	ps, err := d.load(ctx, principalsMax+1)
	d.mu.Lock()
	defer d.mu.Unlock()
	defer close(done)
	d.loading = nil
	d.loads++
	if err != nil {
		d.loadErr, d.failedAt = err, d.now()
		return
	}
	d.loadErr = nil
	truncated := len(ps) > principalsMax
	if truncated {
		ps = ps[:principalsMax]
		if !d.truncated {
			d.log.WarnContext(ctx, "more principals than the authentication directory holds: keys beyond it are looked up in the store one by one",
				slog.Int("principals_max", principalsMax))
		}
	}
	byKey := make(map[string]*store.Principal, len(ps))
	byCert := make(map[string]*store.Principal)
	for i := range ps {
		p := &ps[i]
		switch {
		case p.CertSubject != "":
			byCert[p.CertSubject] = p
		case len(p.KeyHash) == store.KeyHashLen:
			byKey[string(p.KeyHash)] = p
		}
	}
	d.byKey, d.byCert, d.truncated = byKey, byCert, truncated
	if gen == d.gen {
		d.loadedAt = d.now()
	}
}

// invalidate makes the next lookup reload: a principal was created or
// revoked through this coordinator.
func (d *principalDirectory) invalidate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loadedAt = time.Time{}
	d.loadErr = nil
	d.gen++
}

// reloads returns how many reloads ran (tests).
func (d *principalDirectory) reloads() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loads
}

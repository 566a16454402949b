package coordinator

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
)

// Bounds of the authentication failure summary.
const (
	// authFailureAddrsMax bounds the distinct addresses counted in one
	// interval; failures from further addresses count under "other".
	authFailureAddrsMax = 1000
	// authFailureTopAddrs is how many addresses a summary names.
	authFailureTopAddrs = 5
)

// authFailures counts refused authentications and logs them, at Warn, as
// one summary line per interval that had any (the interval of the
// overload summary): the count, the count per reason and the addresses
// that failed most. A failed authentication's own log line drops to Debug
// (it is noted as a refusal), so a flood of wrong keys is a line every
// few seconds, not a line per call. The summary names no key: a wrong
// key may be a valid key of another system, or a typo of a real one.
//
// The same counts reach the audit log too, as one
// AUTHENTICATION_FAILURES event per auditEvery at most (when there were
// failures): a store write per interval, never one per failure, so a flood
// of wrong keys costs the store nothing more.
type authFailures struct {
	startstop.BaseStartStop

	interval time.Duration
	log      *slog.Logger
	trusted  []netip.Prefix
	// auditEvery is the shortest time between two audit events; zero or
	// negative: none. audit records one (its data: the counts since the
	// last one).
	auditEvery time.Duration
	audit      func(ctx context.Context, data map[string]any)

	// mu guards the counts of the current interval.
	mu      sync.Mutex
	n       int64
	reasons map[string]int64
	addrs   map[string]int64

	// Touched by the loop only: when the log and the audit log were last
	// written, and the counts the audit log has not had yet.
	lastLog, lastAudit time.Time
	pendingLog         failureCounts
	pending            failureCounts
}

// failureCounts are the failures of a period, for the audit log.
type failureCounts struct {
	n       int64
	reasons map[string]int64
	addrs   map[string]int64
}

// add merges an interval's counts, keeping at most authFailureAddrsMax
// addresses (further ones count under "other").
func (c *failureCounts) add(n int64, reasons, addrs map[string]int64) {
	if c.reasons == nil {
		c.reasons, c.addrs = make(map[string]int64), make(map[string]int64)
	}
	c.n += n
	for k, v := range reasons {
		c.reasons[k] += v
	}
	for k, v := range addrs {
		if _, ok := c.addrs[k]; !ok && len(c.addrs) >= authFailureAddrsMax {
			k = "other"
		}
		c.addrs[k] += v
	}
}

var _ startstop.Service = (*authFailures)(nil)

// record counts one failure of ctx's call.
func (f *authFailures) record(ctx context.Context, reason string) {
	addr := remoteAddress(ctx, f.trusted)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reasons == nil {
		f.reasons, f.addrs = make(map[string]int64), make(map[string]int64)
	}
	f.n++
	f.reasons[reason]++
	if _, ok := f.addrs[addr]; !ok && len(f.addrs) >= authFailureAddrsMax {
		addr = "other"
	}
	f.addrs[addr]++
}

// Start logs every interval, and writes the audit log every auditEvery,
// until Stop or ctx ends.
func (f *authFailures) Start(ctx context.Context) {
	tick := f.interval
	if f.audit != nil && f.auditEvery > 0 && (tick <= 0 || f.auditEvery < tick) {
		tick = f.auditEvery
	}
	f.lastLog, f.lastAudit = time.Now(), time.Now()
	startEvery(ctx, &f.BaseStartStop, tick, f.runOnce)
}

// runOnce takes the counts gathered since the last tick; it logs them once
// an interval has passed since the last line, and records them in the
// audit log once auditEvery has passed since the last event.
func (f *authFailures) runOnce(ctx context.Context, _ struct{}) struct{} {
	f.mu.Lock()
	n, reasons, addrs := f.n, f.reasons, f.addrs
	f.n, f.reasons, f.addrs = 0, nil, nil
	f.mu.Unlock()
	now := time.Now()
	if n > 0 && f.interval > 0 {
		// Counts of a tick shorter than the log interval wait for the
		// line with the next ones.
		f.logged(ctx, n, reasons, addrs, now)
	}
	if f.audit == nil || f.auditEvery <= 0 {
		return struct{}{}
	}
	if n > 0 {
		f.pending.add(n, reasons, addrs)
	}
	if f.pending.n == 0 || now.Sub(f.lastAudit) < f.auditEvery {
		return struct{}{}
	}
	p := f.pending
	f.pending, f.lastAudit = failureCounts{}, now
	top := make(map[string]int64, authFailureTopAddrs)
	for _, c := range topCounts(p.addrs, authFailureTopAddrs) {
		top[c.k] = c.n
	}
	f.audit(ctx, map[string]any{
		"failures": p.n, "reasons": p.reasons, "addresses": len(p.addrs), "top_addresses": top,
		"period": f.auditEvery.String(),
	})
	return struct{}{}
}

// logged writes the log summary of counts (f.pendingLog holds those of
// ticks shorter than the log interval).
func (f *authFailures) logged(ctx context.Context, n int64, reasons, addrs map[string]int64, now time.Time) {
	f.pendingLog.add(n, reasons, addrs)
	if now.Sub(f.lastLog) < f.interval-f.interval/10 {
		return
	}
	p := f.pendingLog
	f.pendingLog, f.lastLog = failureCounts{}, now
	var b strings.Builder
	for i, c := range topCounts(p.addrs, authFailureTopAddrs) {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(c.k + "=" + itoa(c.n))
	}
	var rs []string
	for k, v := range p.reasons {
		rs = append(rs, k+"="+itoa(v))
	}
	slices.Sort(rs)
	f.log.WarnContext(ctx, "authentication failures in the last interval",
		slog.Duration("interval", f.interval), slog.Int64("failures", p.n),
		slog.String("reasons", strings.Join(rs, " ")), slog.Int("addresses", len(p.addrs)),
		slog.String("top_addresses", b.String()))
}

// count is a key's count.
type count struct {
	k string
	n int64
}

// topCounts is the k largest counts of m, largest first (ties by key).
func topCounts(m map[string]int64, k int) []count {
	top := make([]count, 0, len(m))
	for key, v := range m {
		top = append(top, count{key, v})
	}
	slices.SortFunc(top, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.k, b.k)) })
	return top[:min(len(top), k)]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

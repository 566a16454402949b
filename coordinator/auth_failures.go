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
type authFailures struct {
	startstop.BaseStartStop

	interval time.Duration
	log      *slog.Logger
	trusted  []netip.Prefix

	// mu guards the counts of the current interval.
	mu      sync.Mutex
	n       int64
	reasons map[string]int64
	addrs   map[string]int64
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

// Start logs every interval until Stop or ctx ends.
func (f *authFailures) Start(ctx context.Context) {
	startEvery(ctx, &f.BaseStartStop, f.interval, f.runOnce)
}

// runOnce logs and resets the counts of the interval, if any.
func (f *authFailures) runOnce(ctx context.Context, _ struct{}) struct{} {
	f.mu.Lock()
	n, reasons, addrs := f.n, f.reasons, f.addrs
	f.n, f.reasons, f.addrs = 0, nil, nil
	f.mu.Unlock()
	if n == 0 {
		return struct{}{}
	}
	type count struct {
		k string
		n int64
	}
	var top []count
	for k, v := range addrs {
		top = append(top, count{k, v})
	}
	slices.SortFunc(top, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.k, b.k)) })
	var b strings.Builder
	for i, c := range top[:min(len(top), authFailureTopAddrs)] {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(c.k + "=" + itoa(c.n))
	}
	var rs []string
	for k, v := range reasons {
		rs = append(rs, k+"="+itoa(v))
	}
	slices.Sort(rs)
	f.log.WarnContext(ctx, "authentication failures in the last interval",
		slog.Duration("interval", f.interval), slog.Int64("failures", n),
		slog.String("reasons", strings.Join(rs, " ")), slog.Int("addresses", len(addrs)),
		slog.String("top_addresses", b.String()))
	return struct{}{}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

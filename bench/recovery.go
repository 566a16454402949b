package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/bench/measure"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Recovery mode: how long work held by a dead worker waits.
//
//  1. Worker process A (capacity --jobs, handlers that block) starts;
//     --jobs jobs are created and A starts every one of them.
//  2. Worker process B (capacity --jobs, no-op handler) connects and
//     waits for work.
//  3. A is killed with SIGKILL right after one of its renewals has
//     committed (the bench watches the leases' expiries in the database):
//     A renews every third of --lease, so a kill just after a renewal
//     leaves the most lease to run out, the worst case for the target.
//     The instant before the kill is the zero.
//  4. B must start every job; each one's figure is B's handler start
//     minus the kill, and max − lease is what the coordinator added.
//  5. The run also reads each lease's expiry just after the kill and
//     reports B's start minus it: the coordinator's own delay, whatever
//     the kill's timing.
const (
	// recoveryHoldLimit bounds the wait for A to hold every job.
	recoveryHoldLimit = time.Minute
	// recoverySlack is how long past --lease the bench waits for B before
	// it reports the jobs never recovered.
	recoverySlack = 30 * time.Second
	// recoveryTarget is the bound past the lease.
	recoveryTarget = 200 * time.Millisecond
	// recoveryExpiryRead is how long after the kill the expiries are
	// read: a renewal A sent just before it died may still be committing.
	// It is far below the two thirds of a lease (at least 1 s) before any
	// lease can run out.
	recoveryExpiryRead = 100 * time.Millisecond
	// renewalPoll is how often the expiries are read while waiting for
	// A's next renewal; renewalSlack is how long past a renewal interval
	// that wait may take.
	renewalPoll  = 5 * time.Millisecond
	renewalSlack = 5 * time.Second
	// workerAID names worker A, the lease owner of the jobs it holds.
	workerAID = "bench-worker-a"
)

func (r *runner) recovery(ctx context.Context) error {
	f := r.flags.recovery
	lease := []string{"--lease", f.lease.String()}
	notifyA := make(chan struct{}, 1)
	a, err := startWorkerProcess(r.bin, r.dir, workerAID, r.coord.addr, f.jobs, notifyA, append(lease, "--block")...)
	if err != nil {
		return err
	}
	r.workers = append(r.workers, a)
	if err := a.waitReady(ctx); err != nil {
		return err
	}
	if err := a.begin(); err != nil {
		return err
	}
	if err := r.waitConnected(ctx); err != nil {
		return err
	}
	ids, err := r.createJobs(ctx, f.jobs)
	if err != nil {
		return err
	}
	if err := waitProgress(ctx, a, notifyA, int64(f.jobs), recoveryHoldLimit); err != nil {
		return fmt.Errorf("worker A holding the jobs: %w", err)
	}

	notifyB := make(chan struct{}, 1)
	b, err := startWorkerProcess(r.bin, r.dir, "bench-worker-b", r.coord.addr, f.jobs, notifyB, lease...)
	if err != nil {
		return err
	}
	r.workers = append(r.workers, b)
	if err := b.waitReady(ctx); err != nil {
		return err
	}
	if err := b.begin(); err != nil {
		return err
	}
	if err := r.waitConnected(ctx); err != nil {
		return err
	}
	// B's stream has said Hello; let its credits reach the dispatcher.
	if err := sleepCtx(ctx, latencySettle); err != nil {
		return err
	}
	if n := b.progress.Load(); n != 0 {
		return fmt.Errorf("worker B started %d jobs before A was killed", n)
	}

	if err := r.waitRenewal(ctx, f.jobs, f.lease/3+renewalSlack); err != nil {
		return err
	}
	killAt := time.Now()
	a.kill()
	if err := sleepCtx(ctx, recoveryExpiryRead); err != nil {
		return err
	}
	expiries, err := r.table.leaseExpiries(ctx, workerAID)
	if err != nil {
		return fmt.Errorf("read the lease expiries: %w", err)
	}
	waitErr := waitProgress(ctx, b, notifyB, int64(f.jobs), f.lease+recoverySlack)
	if err := b.stop(stopLimit); err != nil {
		return err
	}

	first := map[string]time.Time{}
	for _, s := range b.starts {
		if t, ok := first[s.id]; !ok || s.at < t.UnixNano() {
			first[s.id] = time.Unix(0, s.at)
		}
	}
	var lat, afterExpiry []time.Duration
	for _, id := range ids {
		t, ok := first[id]
		if !ok {
			continue
		}
		lat = append(lat, t.Sub(killAt))
		if exp, ok := expiries[id]; ok {
			afterExpiry = append(afterExpiry, t.Sub(exp))
		}
	}
	slices.Sort(lat)
	slices.Sort(afterExpiry)
	res := measure.NewResult("leasehold", r.flags.engine, modeRecovery)
	res.SetInt("jobs", int64(f.jobs))
	res.SetMillis("lease_ms", f.lease)
	res.SetInt("recovered", int64(len(lat)))
	fmt.Fprintf(r.stdout, "leasehold %s recovery: coordinator on %s; worker A held %d jobs with a %s lease and was killed with SIGKILL; idle worker B (capacity %d) took them\n",
		r.flags.engine, r.where(), f.jobs, f.lease, f.jobs)
	if len(lat) > 0 {
		q := measure.QuantilesOf(lat)
		worst := lat[len(lat)-1]
		res.SetMillis("recover_p50_ms", q.P50)
		res.SetMillis("recover_max_ms", worst)
		res.SetMillis("over_lease_ms", worst-f.lease)
		fmt.Fprintf(r.stdout, "  kill → started on B  p50 %9.3f ms  max %9.3f ms  (n=%d)\n", millis(q.P50), millis(worst), len(lat))
		fmt.Fprintf(r.stdout, "  max − lease          %9.3f ms  (target: every job within lease + %d ms)\n", millis(worst-f.lease), recoveryTarget.Milliseconds())
	}
	if len(afterExpiry) > 0 {
		q := measure.QuantilesOf(afterExpiry)
		worst := afterExpiry[len(afterExpiry)-1]
		res.SetMillis("expiry_p50_ms", q.P50)
		res.SetMillis("expiry_max_ms", worst)
		// The renewal set the expiry to its commit's now + the lease.
		sinceRenewal := killAt.Sub(earliest(expiries).Add(-f.lease))
		res.SetMillis("kill_after_renewal_ms", sinceRenewal)
		fmt.Fprintf(r.stdout, "  lease expiry → started on B  p50 %9.3f ms  max %9.3f ms  (n=%d: the coordinator's delay; the kill came %.3f ms after A's last renewal)\n",
			millis(q.P50), millis(worst), len(afterExpiry), millis(sinceRenewal))
	}
	fmt.Fprintf(r.stdout, "  recovered %d of %d jobs\n", len(lat), f.jobs)
	fmt.Fprintln(r.stdout, res.String())
	if len(lat) < f.jobs {
		return fmt.Errorf("%d of %d jobs were never started on worker B within --lease + %s: %w", f.jobs-len(lat), f.jobs, recoverySlack, waitErr)
	}
	return nil
}

// waitRenewal returns once A has renewed all n of its leases after the
// call began, within limit.
func (r *runner) waitRenewal(ctx context.Context, n int, limit time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("worker A did not renew its leases within %s", limit))
	defer cancel()
	before, err := r.table.leaseExpiries(ctx, workerAID)
	if err != nil {
		return fmt.Errorf("read the lease expiries: %w", err)
	}
	if len(before) != n {
		return fmt.Errorf("worker A holds %d leases, want %d", len(before), n)
	}
	tick := time.NewTicker(renewalPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		now, err := r.table.leaseExpiries(ctx, workerAID)
		if err != nil {
			return fmt.Errorf("read the lease expiries: %w", err)
		}
		renewed := 0
		for id, at := range now {
			if at.After(before[id]) {
				renewed++
			}
		}
		if renewed == n {
			return nil
		}
	}
}

// createJobs creates n jobs in calls of at most measure.CreateBatchMax and
// returns their ids.
func (r *runner) createJobs(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, 0, n)
	for len(ids) < n {
		k := min(measure.CreateBatchMax, n-len(ids))
		reqs := make([]*leaseholdv1.CreateJobRequest, k)
		for i := range reqs {
			reqs[i] = &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: measure.QueueName, Kind: measure.JobKind}}
		}
		cctx, cancel := context.WithTimeout(ctx, createCallLimit)
		resps, err := r.client.BatchCreate(cctx, reqs)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, resp := range resps {
			ids = append(ids, resp.GetJob().GetId())
		}
		if len(resps) != k {
			return nil, fmt.Errorf("batch create of %d returned %d jobs", k, len(resps))
		}
	}
	return ids, nil
}

// waitProgress waits until worker p has started n handlers, within limit.
func waitProgress(ctx context.Context, p *workerProcess, notify <-chan struct{}, n int64, limit time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("worker %s did not start %d jobs within %s", p.id, n, limit))
	defer cancel()
	for p.progress.Load() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d started: %w", p.progress.Load(), context.Cause(ctx))
		case <-p.exited:
			return fmt.Errorf("worker %s exited (%w); its log: %s", p.id, p.waitErr, p.logPath)
		case <-notify:
		}
	}
	return nil
}

// earliest returns the earliest of the times in m (zero when m is empty).
func earliest(m map[string]time.Time) time.Time {
	var out time.Time
	for _, t := range m {
		if out.IsZero() || t.Before(out) {
			out = t
		}
	}
	return out
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

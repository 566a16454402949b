package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// policyPage is the form that edits a queue's policy, filled with the
// stored one. Only operators and admins get a link to it; the API refuses
// anyone else's POST all the same.
func (c *console) policyPage(req *request) error {
	out, err := c.api.admin.GetQueue(req.ctx, &leaseholdv1.GetQueueRequest{Queue: req.r.URL.Query().Get("queue")})
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "policy.html", "Policy of "+out.GetQueue().GetPolicy().GetQueue(), "queues", out.GetQueue().GetPolicy())
	return nil
}

// updatePolicy reads the stored policy, sets the fields the form edits
// (retry attempts, lease, concurrency, rate limit, dependency) and stores
// it with UpdateQueuePolicy: the fields the form does not show (the retry
// backoff and error codes) are kept as stored.
func (c *console) updatePolicy(req *request) error {
	queue := req.form("queue")
	cur, err := c.api.admin.GetQueue(req.ctx, &leaseholdv1.GetQueueRequest{Queue: queue})
	if err != nil {
		return err
	}
	p := proto.CloneOf(cur.GetQueue().GetPolicy())
	if p.GetRetry() == nil {
		p.Retry = &leaseholdv1.RetryPolicy{}
	}
	if p.GetRateLimit() == nil {
		p.RateLimit = &leaseholdv1.RateLimit{}
	}
	var bad []string
	num := func(field string) int32 {
		v := strings.TrimSpace(req.form(field))
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			bad = append(bad, field)
		}
		return int32(n)
	}
	dur := func(field string) *durationpb.Duration {
		v := strings.TrimSpace(req.form(field))
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad = append(bad, field)
			return nil
		}
		return durationpb.New(d)
	}
	p.Retry.MaxAttempts = num("max_attempts")
	p.DefaultLeaseDuration = dur("default_lease_duration")
	p.ConcurrencyLimit = num("concurrency_limit")
	p.KeyConcurrencyLimit = num("key_concurrency_limit")
	p.RateLimit.Starts = num("rate_limit_starts")
	p.RateLimit.Interval = dur("rate_limit_interval")
	p.RateLimit.PerKey = req.form("rate_limit_per_key") == "on"
	if p.GetRateLimit().GetStarts() == 0 {
		p.RateLimit = nil
	}
	p.DefaultDependency = strings.TrimSpace(req.form("default_dependency"))
	if len(bad) > 0 {
		return status.Errorf(codes.InvalidArgument, "not a number or duration (like 30s, 5m): %s", strings.Join(bad, ", "))
	}
	if _, err := c.api.admin.UpdateQueuePolicy(req.ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: p}); err != nil {
		return err
	}
	return c.done(req, "queues/policy?queue="+url.QueryEscape(queue), "Saved the policy of "+queue+".")
}

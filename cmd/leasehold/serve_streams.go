package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/coordinator"
)

// streamFlags are serve's flags for the bounds of a Connect stream's
// unacknowledged leases (docs/streams.md), each with a LEASEHOLD_*
// environment variable like the other limits.
type streamFlags struct {
	unackedLeases int
	unackedBytes  int
	ackTimeout    time.Duration
	batches       bool
}

// addStreamFlags registers the stream flags (their variables are bound
// by bindFlagEnv).
func (c *cli) addStreamFlags(fs *pflag.FlagSet, f *limitFlags) {
	env := func(flag string) string { return " (env " + limitEnv(flag) + ")" }
	s := &f.streams
	fs.IntVar(&s.unackedLeases, "stream-unacked-leases", coordinator.StreamUnackedLeasesDefault,
		"leases pushed to one worker stream and not yet acknowledged, at most; no more are pushed until it acknowledges"+env("stream-unacked-leases"))
	fs.IntVar(&s.unackedBytes, "stream-unacked-bytes", coordinator.StreamUnackedBytesDefault,
		"bytes of leases pushed to one worker stream and not yet acknowledged, at most"+env("stream-unacked-bytes"))
	fs.DurationVar(&s.ackTimeout, "stream-ack-timeout", coordinator.StreamAckTimeoutDefault,
		"a worker that declared lease_acks and leaves a pushed lease unacknowledged this long has its stream ended and its leases released"+env("stream-ack-timeout"))
	fs.BoolVar(&s.batches, "stream-batches", true,
		"several leases, reports and answers in one worker stream message, for workers that ask; false = one each, as before"+env("stream-batches"))
}

// apply copies the stream bounds into cfg.
func (s *streamFlags) apply(cfg *coordinator.Config) {
	cfg.StreamUnackedLeases = s.unackedLeases
	cfg.StreamUnackedBytes = s.unackedBytes
	cfg.StreamAckTimeout = s.ackTimeout
	cfg.StreamBatchesOff = !s.batches
}

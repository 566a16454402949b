// Package worker is the Go SDK for Leasehold: a Worker that runs handlers
// for leased jobs, and a Client for producers.
//
// A worker in ten lines:
//
//	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfig{})
//	if err != nil { ... }
//	w, err := worker.New(conn, worker.Config{Queues: []string{"emails"}})
//	if err != nil { ... }
//	w.Handle("send", func(ctx context.Context, job *worker.Job) ([]byte, error) {
//		return nil, send(ctx, job.Payload)
//	})
//	err = w.Run(ctx) // until ctx is done; then shuts down gracefully
//
// # Connecting securely
//
// A coordinator beyond loopback serves TLS and authenticates callers. Dial
// (or DialOptions for grpc.NewClient) connects with a DialConfig: TLS
// trusting CAFile or the system roots, a client certificate for mTLS, and
// an API key sent with every call (APIKey, which refuses to send it without
// TLS to anything but loopback). DialConfigFromEnv reads the same
// LEASEHOLD_TLS_* and LEASEHOLD_API_KEY variables as the leasehold CLI. A
// worker's key needs the worker role, and the worker id it uses belongs to
// that key's principal once used.
//
// # Leases
//
// Every job a handler runs is held on a lease: an owner (Config.WorkerID),
// a fencing generation and an expiry on the coordinator's clock. Only the
// current generation may publish anything for the job (checkpoints,
// effects, the outcome); every report carries the token (Job.Token), and
// the coordinator refuses a stale one with LEASE_LOST. Delivery is
// therefore at least once: a lease that expires is claimed again, possibly
// by another worker, and the old holder is fenced out.
//
// The worker opens one WorkerService.Connect stream, says Hello and grants
// credits only for free capacity: running handlers plus credits not yet
// spent never exceed Config.Capacity, so the coordinator cannot push more
// work than the worker can run. A freed slot is granted again as soon as
// its handler's outcome is reported. Each pushed lease is acknowledged
// (LeaseAck) as it arrives, before its handler starts: the coordinator
// pushes a stream only so much it has not acknowledged, and ends a stream
// that declared acknowledgements and stops sending them (docs/streams.md).
// Exactly one goroutine sends on the stream. When GetVersion (asked before
// each stream opens) lists lease_batches, the worker declares it and takes
// several leases or report answers in one message; when it lists
// report_batches, the reports ready at the same moment go in one
// ReportBatch. Nothing waits for a batch to fill.
//
// # Heartbeats and revocation
//
// Every LeaseDuration × HeartbeatFraction (a third of the lease by
// default) one batched Heartbeat renews all held leases; between streams
// the unary Renew is used instead, so a reconnect costs no lease. An answer
// can revoke:
//
//   - LOST (or a LeaseLostNotice, or any lease-bound call refused with
//     LEASE_LOST): the handler's context is cancelled with cause
//     ErrLeaseLost and nothing more is published for that lease — no
//     Complete, no Retry — whatever the handler returns. SaveCheckpoint and
//     Effect return errors wrapping ErrLeaseLost from then on.
//   - CANCEL_REQUESTED (or a CancelNotice): the context is cancelled with
//     cause ErrCancelRequested. When the handler returns an error, the
//     worker acknowledges with WorkerService.Cancel and the job ends
//     CANCELLED. A handler that returns success anyway has done the work:
//     it is completed, not hidden as cancelled, and the coordinator's single
//     compare-and-set decides which report wins.
//
// # Outcomes
//
// A nil error completes the job with the handler's result. An error is
// reported through Retry: retryable unless wrapped by NonRetryable (see
// Retryable, RetryAfter, WithCode), so a plain error is retried with the
// queue's backoff until the attempt budget is spent and the job is DEAD. A
// panic is recovered and reported as a retryable failure with code "PANIC"
// and the panic value as the message. Reports are retried a few times with
// backoff on UNAVAILABLE (repeating one is safe: the coordinator answers a
// repeated report from the same generation with the same outcome); one
// refused with LEASE_LOST is dropped.
//
// # Checkpoints and effects
//
// Job.Checkpoint is the latest checkpoint saved by any earlier attempt;
// Job.SaveCheckpoint saves a new one, fenced by the lease. Job.Effect runs
// an external call at most once per key across attempts through the
// coordinator's effect ledger: reserve, skip a call an earlier attempt
// recorded SUCCEEDED (its result is returned), refuse with an
// *UnknownEffectError one left RESERVED or UNKNOWN (reconcile with the
// provider first), otherwise call and record the outcome.
//
// # Reconnects
//
// When the stream fails, or the coordinator sends Drain (it is shutting
// down; the worker then half-closes the stream and reads it to its end,
// releasing any lease still pushed), the worker stops taking work on that
// stream and reconnects —
// possibly to another coordinator behind the same address — after a capped
// exponential backoff with jitter (Config.ReconnectMin, ReconnectMax).
// Running handlers are not interrupted: their leases are renewed through
// Renew meanwhile and on the new stream afterwards.
//
// # Refusals
//
// A coordinator under load refuses calls before doing anything, with a
// google.rpc.RetryInfo delay: RESOURCE_EXHAUSTED (RATE_LIMITED,
// WATCH_LIMIT) or UNAVAILABLE (OVERLOADED). A connection dialled with
// DialOptions (or Dial) repeats a refused unary call after that delay, up
// to 5 times; a refused stream waits at least the delay before it
// reconnects. Repeating is safe because a refused call did nothing, even
// a CreateJob without a request_id.
//
// # Shutdown
//
// When Run's context is done:
//
//  1. Stop taking work: no more credits, no reconnects, and the stream is
//     half-closed, so the coordinator pushes nothing more and ends it; a
//     lease it had already pushed against an earlier credit is received
//     and released at once, never lost in transit.
//  2. Give running handlers Config.ShutdownGrace to finish, renewing their
//     leases (through Renew) and reporting their outcomes as usual.
//  3. Cancel the remaining handlers with cause ErrShutdown and Release
//     their leases, which gives the jobs back without spending an attempt
//     — never a lease already lost, which belongs to someone else.
//  4. Return once every handler and report is done.
//
// # Tracing
//
// Client.Create injects the caller's span context into the job's metadata
// (W3C "traceparent"/"tracestate"). The worker starts each handler's span
// in a new trace, linked to the producer's span: the job runs later,
// possibly several times, so it is not a child of the request that
// created it. Spans come from Config.TracerProvider or the global one.
//
// Dial with DialOptions so that calls are traced too: each becomes a gRPC
// client span that carries the caller's trace context to the coordinator,
// whose server span continues it (CreateJob in the producer's trace). The
// coordinator records each lease it hands out as a span linked to the
// producer's span, like the handler span is.
package worker

// Package coordinator serves the Leasehold API — JobService, WorkerService
// and AdminService, plus grpc.health.v1 and server reflection — over a
// store.Store.
//
// # Shape
//
// Each RPC is a thin translation shell: decode and validate the request
// (validator, one method per request message, so invalid input is refused
// with INVALID_ARGUMENT and google.rpc.BadRequest field violations before
// anything is written), call the store with the caller's tenant and the
// injected clock, encode the answer, and map any error with toStatus — the
// one errors.Is/As switch that attaches google.rpc.ErrorInfo reasons
// (LEASE_LOST, IDEMPOTENCY_CONFLICT, JOB_NOT_FOUND, EFFECT_NOT_FOUND, …)
// and never sends SQL text, stacks or internal error strings. What was
// not found is told by the store's error (store.ErrEffectNotFound,
// store.ErrPrincipalNotFound, …), never decided by a handler.
//
// The shapes a handler shares live in handler.go: leaseCall (a worker
// call on one lease: decode, check the token's worker id, call, map the
// error) and reportCall. A terminal report (Complete, Retry, Cancel,
// Release) has one entry, Coordinator.report, for both transports: the
// unary RPC and the Connect stream's report decode it with
// validator.Report straight into a store.Report.
//
// # State
//
// The Coordinator holds its configuration, logger, store, validator and
// gRPC server, and one value per owner (components.go): core (the
// dispatcher, the registry of worker streams, the watch hub, metrics,
// tracer and activity), identity (authenticator, worker-id owners, lease
// signer), defences (pre-auth limits, rate limiters, load shedder,
// health-watch limit and their refusal counts), maintenance (reaper,
// pruner, scheduler, bulk runner, throughput sampler), probes (health
// server, readiness, queue readings) and lifecycle (what Serve starts and
// Shutdown stops).
//
// # Worker streams
//
// WorkerService.Connect sessions are fed by the dispatch package: a stream
// registers as a waiter with the credits its worker granted, and the
// dispatcher pushes leases as jobs become available (store notifications,
// local hints, polling as the fallback). Exactly one goroutine sends on a
// stream. Heartbeats renew all listed leases in one store call. The
// coordinator remembers which stream holds which job, so CancelJob reaches
// the holder on this coordinator at once; a holder on another coordinator
// learns it from its next heartbeat. A pushed lease is just a lease: if the
// worker never sees it, it expires and is claimed again at the next
// generation.
//
// # Identity
//
// The auth interceptor (auth.go; go-grpc-middleware's auth behind a
// selector that lets health and reflection through) resolves every call's
// caller — an API key's or a client certificate's principal, or with
// AuthNone an anonymous admin of Config.Tenant — and checks the method's
// permission from methodPermissions (permission.go), the one table of
// who may call what. Handlers read the tenant and the caller only from the
// context (a typed key, tenant.go), never from a request. Queue scopes are
// checked in the handlers (scope.go): a named queue out of scope is
// PERMISSION_DENIED, a job out of scope NOT_FOUND exactly like a missing
// one. checkWorker (worker_identity.go) keeps a worker id to the
// principal that first used it; every call acting as a worker goes
// through it. Operator actions are audited (key_service.go). Verified
// principals are cached for Config.AuthCacheTTL, which bounds how long a
// revocation takes to reach every coordinator; streams re-check theirs and
// end when it is revoked.
//
// # Under load and abuse
//
// Every resource one client can take is bounded, and each bound is a
// Config field with its reason beside its default (config.go):
//
//   - connections: a handshake timeout and a cap per listener
//     (limitListener), an optional MaxConnectionAge so clients
//     rebalance;
//   - messages: the receive limit (payload limit plus headroom) and an
//     explicit send limit; list pages have a byte budget and a BASIC view
//     without payloads, decided in the store so that a page never holds
//     more than it returns;
//   - calls: token buckets per principal (per connection with AuthNone)
//     for unary calls and stream opens, and a bound on in-flight store
//     work in a read lane and a write lane (refusals.go);
//   - watches: WatchJob sleeps in the watchHub until its job changes
//     (local writes, and the store's change notifications across
//     coordinators), capped per connection and in total (watch_hub.go);
//   - worker streams: the outbound queue bounds of session.go.
//
// Refusals carry an ErrorInfo reason and a RetryInfo delay, happen before
// the call does anything (so they are always safe to repeat, which the Go
// SDK does), and are logged as one Warn summary per interval. The e2e
// abuse suite measures each bound against a real process.
//
// # Circuit breakers
//
// Breakers live in the store (store/breaker.go decides, the engines keep
// one row per tenant and dependency): reports feed them through the
// group committer and claims honour them, so every coordinator on the
// database sees the same state with no messages between them. The admin
// service only shows and operates them (list, get, reset, force-open,
// policy, events) and audits each operator action. Every transition is a
// breaker event in the store, and the store tells the coordinator's
// metrics (store.EngineOptions.Breakers) of those it committed.
//
// Shutdown follows the numbered steps documented on Coordinator.Shutdown.
package coordinator

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
// (LEASE_LOST, IDEMPOTENCY_CONFLICT, JOB_NOT_FOUND, …) and never sends SQL
// text, stacks or internal error strings.
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
// # Not yet
//
// Circuit breakers are not available in this version: ListBreakers answers
// an empty list and ResetBreaker answers UNIMPLEMENTED. Until
// authentication lands every call runs as Config.Tenant; the tenant already
// travels from the request context (a typed key) to every store call.
//
// Shutdown follows the numbered steps documented on Coordinator.Shutdown.
package coordinator

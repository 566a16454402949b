package coordinator

import (
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/store"
)

// streamRegistry holds the worker streams connected here, one per worker
// id: the stream holding a lease is found from the lease's owner.
type streamRegistry struct {
	// mu guards sessions and draining. Lock order: mu, then session.mu.
	mu       sync.Mutex
	sessions map[sessionKey]*session
	// draining is set at shutdown: no stream registers any more.
	draining bool
}

type sessionKey struct{ tenant, worker string }

// add registers s, replacing (and ending) an earlier stream of the same
// worker id, whose leases it takes over.
func (r *streamRegistry) add(s *session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return statusError(codes.Unavailable, ReasonShuttingDown, "coordinator shutting down: connect to another coordinator")
	}
	key := sessionKey{s.tenant, s.hello.workerID}
	if old := r.sessions[key]; old != nil {
		old.mu.Lock()
		old.closed = true
		for id, tok := range old.leases {
			s.leases[id] = tok
		}
		old.leases = map[string]store.LeaseToken{}
		old.mu.Unlock()
		old.cancel(errReplaced)
	}
	r.sessions[key] = s
	return nil
}

// remove unregisters s (unless a newer stream of its worker id replaced
// it) and closes it.
func (r *streamRegistry) remove(s *session) (held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := sessionKey{s.tenant, s.hello.workerID}
	if r.sessions[key] == s {
		delete(r.sessions, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return len(s.leases)
}

// get returns the stream of worker in tenant, if it is connected here.
func (r *streamRegistry) get(tenant, worker string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[sessionKey{tenant, worker}]
}

// count is how many streams are connected here.
func (r *streamRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// list returns the streams connected here: all of them, or with a
// non-empty tenant that tenant's. draining, when set, also stops new
// streams from registering (shutdown step 2).
func (r *streamRegistry) list(tenant string, draining bool) []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if draining {
		r.draining = true
	}
	out := make([]*session, 0, len(r.sessions))
	for key, s := range r.sessions {
		if tenant == "" || key.tenant == tenant {
			out = append(out, s)
		}
	}
	return out
}

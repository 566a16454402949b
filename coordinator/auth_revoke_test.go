package coordinator

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestAWatchEndsWhenItsKeyIsRevoked: every stream, not only Connect, that
// outlives its key's revocation ends UNAUTHENTICATED, not CANCELLED: a
// WatchJob of a reader whose key is revoked while it waits.
func TestAWatchEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) { cfg.AuthCacheTTL = 200 * time.Millisecond })
	key, p := e.key(tenantA, store.RoleReader)
	job := e.job(tenantA, "q")
	w, err := leaseholdv1.NewJobServiceClient(e.dial(key)).WatchJob(t.Context(), &leaseholdv1.WatchJobRequest{JobId: job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the QUEUED event
		t.Fatalf("first event: %v", err)
	}
	if _, err := e.st.RevokePrincipal(t.Context(), store.RevokePrincipalParams{Tenant: tenantA, ID: p.ID, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := w.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unauthenticated || reasonOf(err) != ReasonUnauthenticated {
			t.Errorf("the watch ended with %v; want UNAUTHENTICATED (its credential is gone, not the call cancelled)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch of a revoked key still runs after 5s")
	}
}

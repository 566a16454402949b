package coordinator

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// faultyStore is a real SQLite store with injected faults: GetJob panics
// and ListJobs blocks until its context ends.
type faultyStore struct {
	store.Store
}

func (faultyStore) GetJob(context.Context, string, string) (*store.Job, error) {
	panic("injected panic with secret detail")
}

func (faultyStore) ListJobs(ctx context.Context, _ store.ListJobsParams) (*store.JobPage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// setup serves a coordinator over a real SQLite file (wrapped with faults)
// on a real socket, logging at Debug into logs.
func setup(t *testing.T, configure func(*Config)) (*grpc.ClientConn, *testlog.Buffer) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	cfg := Config{
		Store:  faultyStore{st},
		Logger: logs.Logger(slog.LevelDebug),
	}
	if configure != nil {
		configure(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	return conn, logs
}

func TestLogsNeverCarryPayloadsOrIdempotencyKeys(t *testing.T) {
	t.Parallel()
	conn, logs := setup(t, nil)
	jobs := leaseholdv1.NewJobServiceClient(conn)
	_, err := jobs.CreateJob(context.Background(), &leaseholdv1.CreateJobRequest{
		Job:       &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Payload: []byte("PAYLOAD-SECRET-123")},
		RequestId: "IDEMPOTENCY-KEY-456",
	})
	if err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "CreateJob") || !strings.Contains(out, "grpc.code=OK") {
		t.Fatalf("the call was not logged with its method and code:\n%s", out)
	}
	for _, secret := range []string{"PAYLOAD-SECRET-123", "UEFZTE9BRC1TRUNSRVQtMTIz", "IDEMPOTENCY-KEY-456"} {
		if strings.Contains(out, secret) {
			t.Fatalf("logs contain %q:\n%s", secret, out)
		}
	}
}

func TestPanicBecomesInternalAndIsLoggedWithStack(t *testing.T) {
	t.Parallel()
	conn, logs := setup(t, nil)
	_, err := leaseholdv1.NewJobServiceClient(conn).GetJob(context.Background(), &leaseholdv1.GetJobRequest{JobId: "0191d9c8-3f1e-7a2b-9c4d-5e6f7a8b9c0d"})
	st := status.Convert(err)
	if st.Code() != codes.Internal || strings.Contains(st.Message(), "secret") {
		t.Fatalf("panic answered as %v %q", st.Code(), st.Message())
	}
	out := logs.String()
	if !strings.Contains(out, "injected panic with secret detail") || !strings.Contains(out, "goroutine") {
		t.Fatalf("panic not logged with its stack:\n%s", out)
	}
}

func TestUnaryCallsGetTheServerSideDeadline(t *testing.T) {
	t.Parallel()
	conn, _ := setup(t, func(c *Config) { c.UnaryTimeout = 200 * time.Millisecond })
	// The client sets no deadline; the store call blocks until the
	// server-side one ends it.
	_, err := leaseholdv1.NewJobServiceClient(conn).ListJobs(context.Background(), &leaseholdv1.ListJobsRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("blocked call ended with %v; want DEADLINE_EXCEEDED", err)
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	var cfg Config
	d := cfg.WithDefaults()
	if cfg.Tenant != "" {
		t.Fatal("WithDefaults changed its receiver")
	}
	if d.Tenant != TenantDefault || d.PayloadMaxBytes != PayloadMaxBytesDefault || d.ShutdownGrace != ShutdownGraceDefault ||
		d.DefaultLeaseDuration != 30*time.Second || d.ID == "" || d.Version != VersionDefault || d.Retention != RetentionDefault {
		t.Fatalf("defaults = %+v", d)
	}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "Store is required") {
		t.Fatalf("Validate without a store = %v", err)
	}
	if d.ListPageBytes != ListPageBytesDefault || d.ConnectionTimeout != ConnectionTimeoutDefault || d.MaxConnections != MaxConnectionsDefault ||
		d.UnaryRate != UnaryRateDefault || d.StreamOpenBurst != StreamOpenBurstDefault || d.MaxInFlightWrites != MaxInFlightWritesDefault ||
		d.WatchersMax != WatchersMaxDefault || d.MaxConnectionAge != 0 {
		t.Fatalf("limit defaults = %+v", d)
	}
	bad := Config{Store: faultyStore{}, Tenant: "bad tenant", DefaultLeaseDuration: time.Hour + 1, PayloadMaxBytes: store.PayloadMaxBytes + 1,
		ListPageBytes: ListPageBytesMax + 1, UnaryRate: math.NaN(), MaxConnections: -1, ShedWait: -time.Second, WatchersMax: -1}.WithDefaults()
	err := bad.Validate()
	for _, want := range []string{"Tenant", "DefaultLeaseDuration", "PayloadMaxBytes", "ListPageBytes", "UnaryRate", "MaxConnections", "ShedWait", "WatchersMax"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want a complaint about %s", err, want)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}

package testserver

import (
	"context"
	"testing"

	"os"

	"go.uber.org/goleak"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRestartKeepsTheAddressAndTheDatabase(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := Start(t, Options{Postgres: pg})
			created, err := leaseholdv1.NewJobServiceClient(s.Dial(t)).CreateJob(ctx, &leaseholdv1.CreateJobRequest{
				Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"},
			})
			if err != nil {
				t.Fatal(err)
			}
			s2 := Restart(t, s)
			if s2.Addr != s.Addr || s2.DatabaseURL != s.DatabaseURL || s2.SQLitePath != s.SQLitePath {
				t.Fatalf("restarted on %s %q %q; want %s %q %q", s2.Addr, s2.DatabaseURL, s2.SQLitePath, s.Addr, s.DatabaseURL, s.SQLitePath)
			}
			got, err := leaseholdv1.NewJobServiceClient(s2.Dial(t)).GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: created.GetJob().GetId()})
			if err != nil || got.GetJob().GetId() != created.GetJob().GetId() {
				t.Fatalf("job after restart = %v, %v", got, err)
			}
			s.Stop() // idempotent
		})
	}
}

func TestStartProcessServesTheRealBinary(t *testing.T) {
	t.Parallel()
	p := StartProcess(t)
	v, err := leaseholdv1.NewWorkerServiceClient(p.Dial(t)).GetVersion(context.Background(), &leaseholdv1.GetVersionRequest{})
	if err != nil || v.GetStoreEngine() != "sqlite" {
		t.Fatalf("GetVersion = %v, %v", v, err)
	}
	p.Signal(os.Interrupt)
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v after SIGINT\n%s", code, err, p.Output())
	}
}

package e2e

import (
	"slices"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// The foundation contract: the server answers on a real TCP socket, health
// reports SERVING, and reflection lists the three Leasehold services.
func TestServerReportsServingAndListsServicesThroughReflection(t *testing.T) {
	t.Parallel()
	s := setupSQLite(t)
	conn := s.Dial(t)
	ctx := ctxT(t)

	for _, svc := range []string{"", "leasehold.v1.JobService", "leasehold.v1.WorkerService", "leasehold.v1.AdminService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health check %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, want SERVING", svc, resp.GetStatus())
		}
	}

	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = rs.CloseSend()
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{"leasehold.v1.JobService", "leasehold.v1.WorkerService", "leasehold.v1.AdminService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v; missing %s", names, want)
		}
	}
}

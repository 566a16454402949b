package coordinator

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// TestEveryMethodHasAPermission walks every method of every service the
// coordinator registers (JobService, WorkerService, AdminService, health,
// reflection) and fails for any without a row in methodPermissions, so a
// new RPC cannot ship without one. Rows for methods that no longer exist
// fail too, and so does a public service with a non-public method.
func TestEveryMethodHasAPermission(t *testing.T) {
	t.Parallel()
	c := newTestCoordinator(t, nil)
	registered := map[string]bool{}
	services := c.GRPCServer().GetServiceInfo()
	for _, want := range []string{"leasehold.v1.JobService", "leasehold.v1.WorkerService", "leasehold.v1.AdminService",
		"leasehold.v1.ScheduleService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		if _, ok := services[want]; !ok {
			t.Errorf("service %s is not registered", want)
		}
	}
	for svc, info := range services {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			registered[full] = true
			perm, ok := methodPermissions[full]
			switch {
			case !ok:
				t.Errorf("%s has no permission in methodPermissions: add its row", full)
			case publicServices[svc] && perm != permPublic:
				t.Errorf("%s is in a public service but needs %s", full, perm)
			case !publicServices[svc] && perm == permPublic:
				t.Errorf("%s is public but its service %s goes through auth", full, svc)
			}
		}
	}
	for full := range methodPermissions {
		if !registered[full] {
			t.Errorf("methodPermissions has a row for %s, which is not registered", full)
		}
	}
}

// TestRolePermissions pins the role table: who may do what is part of the
// security design (the README's table says the same).
func TestRolePermissions(t *testing.T) {
	t.Parallel()
	want := map[store.Role]string{
		store.RoleProducer: "authenticated jobs.create jobs.read jobs.cancel schedules.read schedules.write schedules.trigger",
		store.RoleWorker:   "authenticated work",
		store.RoleReader:   "authenticated jobs.read queues.read dead.read breakers.read workers.read schedules.read operations.read",
		store.RoleOperator: "authenticated jobs.read jobs.cancel queues.read queues.write dead.read dead.write breakers.read breakers.write workers.read workers.write audit.read schedules.read schedules.pause schedules.trigger operations.read operations.write",
		store.RoleAdmin:    "authenticated jobs.create jobs.read jobs.cancel work queues.read queues.write dead.read dead.write breakers.read breakers.write workers.read workers.write audit.read keys.manage schedules.read schedules.write schedules.pause schedules.trigger operations.read operations.write",
	}
	for _, r := range store.Roles {
		var got []string
		for _, p := range rolePermissions[r] {
			got = append(got, string(p))
		}
		if strings.Join(got, " ") != want[r] {
			t.Errorf("%s may %q, want %q", r, strings.Join(got, " "), want[r])
		}
	}
	used := map[permission]bool{}
	for _, p := range methodPermissions {
		used[p] = true
	}
	for _, perms := range rolePermissions {
		for _, p := range perms {
			if !used[p] {
				t.Errorf("permission %s is held by a role but needed by no method", p)
			}
		}
	}
	for p := range used {
		if p != permPublic && p != permConsole && !allows(store.RoleAdmin, p) {
			t.Errorf("admin lacks %s", p)
		}
	}
}

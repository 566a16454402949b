package e2e

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// TestUniqueJobsOverGRPC: through a real coordinator and socket, on both
// engines, a unique create answers the live holder with duplicate set, a
// cancelled holder frees the key, FAIL is ALREADY_EXISTS with reason
// UNIQUE_CONFLICT and creates nothing (a whole batch), a batch answers
// duplicates item by item, and malformed options are field violations.
func TestUniqueJobsOverGRPC(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		byCustomer := &leaseholdv1.UniqueOptions{ByMetadataKeys: []string{"customer"}}
		mk := func(payload, customer string, u *leaseholdv1.UniqueOptions) *leaseholdv1.CreateJobRequest {
			s := spec("sync", payload)
			s.Metadata = map[string]string{"customer": customer}
			return &leaseholdv1.CreateJobRequest{Job: s, Unique: u}
		}
		first, err := c.jobs.CreateJob(ctx, mk(`{"n":1}`, "c1", byCustomer))
		if err != nil {
			t.Fatal(err)
		}
		if first.GetDuplicate() || first.GetReplayed() {
			t.Fatalf("the first create was answered as duplicate %v / replayed %v", first.GetDuplicate(), first.GetReplayed())
		}
		dup, err := c.jobs.CreateJob(ctx, mk(`{"n":2}`, "c1", byCustomer))
		if err != nil {
			t.Fatal(err)
		}
		if !dup.GetDuplicate() || dup.GetJob().GetId() != first.GetJob().GetId() {
			t.Fatalf("a second create for customer c1 answered %s duplicate=%v, want %s as a duplicate",
				dup.GetJob().GetId(), dup.GetDuplicate(), first.GetJob().GetId())
		}

		fail := &leaseholdv1.UniqueOptions{ByMetadataKeys: []string{"customer"}, OnConflict: leaseholdv1.UniqueOptions_ON_CONFLICT_FAIL}
		_, err = c.jobs.CreateJob(ctx, mk(`{}`, "c1", fail))
		wantReason(t, err, codes.AlreadyExists, coordinator.ReasonUniqueConflict)

		batch, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{
			mk(`{}`, "c1", byCustomer), mk(`{}`, "c2", byCustomer), mk(`{}`, "c2", byCustomer), mk(`{}`, "c3", nil),
		}})
		if err != nil {
			t.Fatal(err)
		}
		var dups []bool
		for _, r := range batch.GetResponses() {
			dups = append(dups, r.GetDuplicate())
		}
		if !slices.Equal(dups, []bool{true, false, true, false}) || batch.GetResponses()[2].GetJob().GetId() != batch.GetResponses()[1].GetJob().GetId() {
			t.Fatalf("batch duplicates = %v, want [true false true false] with item 2 answering item 1's job", dups)
		}
		_, err = c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{
			mk(`{}`, "c9", byCustomer), mk(`{}`, "c1", fail),
		}})
		wantReason(t, err, codes.AlreadyExists, coordinator.ReasonUniqueConflict)
		list, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Queue: "sync"})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(list.GetJobs()); n != 3 {
			t.Fatalf("%d jobs in sync, want 3 (c1, c2, c3; the refused batch created none)", n)
		}

		if _, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: first.GetJob().GetId()}); err != nil {
			t.Fatal(err)
		}
		again, err := c.jobs.CreateJob(ctx, mk(`{}`, "c1", fail))
		if err != nil {
			t.Fatalf("a create after the holder was cancelled: %v", err)
		}
		if again.GetDuplicate() || again.GetJob().GetId() == first.GetJob().GetId() {
			t.Fatal("a create after the holder was cancelled did not make a new job")
		}

		// With a period the finished holder still counts.
		period := &leaseholdv1.UniqueOptions{Key: "digest", Period: durationpb.New(time.Hour)}
		p1, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("sync", `{}`), Unique: period})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: p1.GetJob().GetId()}); err != nil {
			t.Fatal(err)
		}
		p2, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("sync", `{}`), Unique: period})
		if err != nil || !p2.GetDuplicate() || p2.GetJob().GetId() != p1.GetJob().GetId() {
			t.Fatalf("a create within the period answered %v duplicate=%v (%v), want the cancelled %s",
				p2.GetJob().GetId(), p2.GetDuplicate(), err, p1.GetJob().GetId())
		}

		for _, tc := range []struct {
			u     *leaseholdv1.UniqueOptions
			field string
		}{
			{&leaseholdv1.UniqueOptions{}, "unique"},
			{&leaseholdv1.UniqueOptions{Key: "k", ByMetadataKeys: []string{"a"}}, "unique"},
			{&leaseholdv1.UniqueOptions{Key: "derived:x"}, "unique.key"},
			{&leaseholdv1.UniqueOptions{ByMetadataKeys: []string{"a", "a"}}, "unique.by_metadata_keys[1]"},
			{&leaseholdv1.UniqueOptions{Key: "k", Period: durationpb.New(time.Millisecond)}, "unique.period"},
			{&leaseholdv1.UniqueOptions{Key: "k", OnConflict: 7}, "unique.on_conflict"},
		} {
			_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("sync", `{}`), Unique: tc.u})
			wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
			if got := fieldViolations(err); !slices.Equal(got, []string{tc.field}) {
				t.Fatalf("unique %v: field violations %v, want [%s]", tc.u, got, tc.field)
			}
		}
	})
}

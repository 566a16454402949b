package main

import (
	"strings"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// The schedule commands against a real coordinator: create, get, list,
// update (only the flags given change), trigger, runs, pause, resume,
// delete.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("usage errors are usage errors and bad specs are INVALID_ARGUMENT", func(t *testing.T) {
		h.fail(exitUsage, []string{"missing NAME"}, "schedule", "create")
		h.fail(exitUsage, []string{"one of --cron and --every"}, "schedule", "create", "x", "--queue", "q", "--kind", "k")
		h.fail(exitUsage, []string{"--catch-up"}, "schedule", "create", "x", "--queue", "q", "--kind", "k", "--every", "1m", "--catch-up", "sometimes")
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "spec.cron"}, "schedule", "create", "x", "--queue", "q", "--kind", "k", "--cron", "61 * * * *")
		h.fail(exitFail, []string{"NOT_FOUND", "SCHEDULE_NOT_FOUND"}, "schedule", "get", "never-made")
		h.fail(exitUsage, []string{"nothing to change"}, "schedule", "update", "x")
	})

	t.Run("create, get, list, update, trigger, runs, pause, resume, delete", func(t *testing.T) {
		var created leaseholdv1.CreateScheduleResponse
		h.json(&created, "schedule", "create", "nightly-report", "--queue", "reports", "--kind", "report.build",
			"--cron", "0 2 * * *", "--time-zone", "Europe/Paris", "--meta", "team=finance", "--overlap", "skip")
		sc := created.GetSchedule()
		if sc.GetSpec().GetTimeZone() != "Europe/Paris" || sc.GetSpec().GetOverlap() != leaseholdv1.OverlapPolicy_OVERLAP_POLICY_SKIP ||
			sc.GetNextTickTime().AsTime().In(mustLoad(t, "Europe/Paris")).Hour() != 2 {
			t.Fatalf("created %v", sc)
		}
		r := h.ok("schedule", "get", "nightly-report")
		for _, want := range []string{"0 2 * * * (Europe/Paris)", "team=finance", "skip", "active"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("schedule get lacks %q:\n%s", want, r.stdout)
			}
		}
		r = h.ok("schedule", "list")
		if !strings.Contains(r.stdout, "nightly-report") || !strings.Contains(r.stdout, "reports") {
			t.Errorf("schedule list:\n%s", r.stdout)
		}
		var up leaseholdv1.UpdateScheduleResponse
		h.json(&up, "schedule", "update", "nightly-report", "--every", "1h")
		if s := up.GetSchedule().GetSpec(); s.GetInterval().AsDuration() != time.Hour || s.GetCron() != "" ||
			s.GetMetadata()["team"] != "finance" || s.GetOverlap() != leaseholdv1.OverlapPolicy_OVERLAP_POLICY_SKIP {
			t.Fatalf("update changed more than --every: %v", s)
		}
		r = h.ok("schedule", "trigger", "nightly-report", "--request-id", "cli-1")
		if !strings.Contains(r.stdout, "triggered: job ") {
			t.Errorf("schedule trigger: %q", r.stdout)
		}
		var runs leaseholdv1.ListScheduleRunsResponse
		h.json(&runs, "schedule", "runs", "nightly-report")
		if len(runs.GetRuns()) != 1 || runs.GetRuns()[0].GetOutcome() != leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_TRIGGERED {
			t.Fatalf("runs %v", &runs)
		}
		if r := h.ok("schedule", "pause", "nightly-report", "--reason", "quarter close"); !strings.Contains(r.stdout, "paused") {
			t.Errorf("pause: %q", r.stdout)
		}
		if r := h.ok("schedule", "get", "nightly-report"); !strings.Contains(r.stdout, "paused: quarter close") {
			t.Errorf("get after pause:\n%s", r.stdout)
		}
		if r := h.ok("schedule", "resume", "nightly-report"); !strings.Contains(r.stdout, "resumed; next tick") {
			t.Errorf("resume: %q", r.stdout)
		}
		h.ok("schedule", "delete", "nightly-report")
		h.fail(exitFail, []string{"NOT_FOUND"}, "schedule", "get", "nightly-report")
	})
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

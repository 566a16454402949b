package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestConsoleBulkInBrowser fills a dead-letter queue, replays the dead
// jobs one error code matches by filter (dry run, count, confirmation),
// watches the operation finish on its live page and checks that exactly
// those jobs were replayed; cancels queued jobs by filter from the jobs
// page; and then, signed in as a reader, sees no bulk button and has its
// forged bulk POSTs (with a valid CSRF token) refused by the coordinator,
// and a bulk POST without a token refused by the console.
func TestConsoleBulkInBrowser(t *testing.T) {
	e := newEnv(t)
	e.signIn(e.adminKey)

	smtp := e.kill("mailer", "SMTP_DOWN", 6)
	other := e.kill("mailer", "BAD_ADDRESS", 2)

	// The filter typed on the dead-letter page lists only its jobs.
	e.open("dead")
	e.run("filter the dead letters",
		chromedp.SendKeys(chromedp.CSS(`input[name="queue"]`), "mailer"),
		chromedp.SendKeys(chromedp.CSS(`input[name="filter"]`), `error_code = "SMTP_DOWN"`),
		chromedp.Submit(chromedp.CSS(`input[name="filter"]`)))
	e.waitLocation("the filtered dead letters", "filter=")
	if n := e.count("table.dead tbody tr"); n != len(smtp) {
		t.Fatalf("the filter lists %d dead jobs, want %d", n, len(smtp))
	}
	e.shot("dead-filtered")

	// Replay matching…: a dry run first, with the count and a sample.
	e.run("replay matching", chromedp.Click(chromedp.CSS("#bulk-replay")), chromedp.WaitVisible(chromedp.CSS("#dry-count")))
	if got := get(e, "the dry run's count", chromedp.Text(chromedp.CSS("#dry-count"))); got != strconv.Itoa(len(smtp)) {
		t.Fatalf("the dry run counts %s jobs, want %d", got, len(smtp))
	}
	if f := get(e, "the filter", chromedp.Text(chromedp.CSS("#bulk-filter"))); f != `queue = "mailer" AND error_code = "SMTP_DOWN"` {
		t.Fatalf("the dry run's filter is %q", f)
	}
	if n := e.count("table.sample tbody tr"); n == 0 || n > len(smtp) {
		t.Fatalf("the sample lists %d jobs", n)
	}
	for _, id := range other {
		if e.count(`table.sample tr[data-job="`+id+`"]`) != 0 {
			t.Fatalf("the sample holds %s, a dead job of another error code", id)
		}
	}
	// The dry run changed nothing.
	e.wantReplayed(smtp, false)
	e.shot("bulk-dry-run")

	// Confirm: the operation starts and its page follows it live.
	e.run("confirm",
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "relay fixed"),
		chromedp.Click(chromedp.CSS("#bulk-confirm")))
	e.waitLocation("the operation's page", "/operations/")
	e.waitText("started", ".msg", func(s string) bool { return strings.Contains(s, "6 jobs matched (the dry run counted 6)") })
	e.waitLive("the operation finishes", "#op-state", func(s string) bool { return s == "succeeded" })
	if got := e.waitLive("acted", "#op-counts .acted", func(string) bool { return true }); got != strconv.Itoa(len(smtp)) {
		t.Fatalf("the operation acted on %s jobs, want %d", got, len(smtp))
	}
	if n := e.count("#op-live[hx-get]"); n != 0 {
		t.Fatal("a finished operation's page still polls")
	}
	if n := e.count("#op-cancel"); n != 0 {
		t.Fatal("a finished operation offers Cancel")
	}
	e.shot("operation")
	e.wantReplayed(smtp, true)
	e.wantReplayed(other, false)

	// The operations page lists it, linked from the navigation.
	e.run("operations", chromedp.Click(chromedp.CSS(`nav a[href$="/operations"]`)), chromedp.WaitVisible(chromedp.CSS("table.operations")))
	e.waitText("listed", "table.operations tbody", func(s string) bool { return strings.Contains(s, "replay") && strings.Contains(s, "succeeded") })

	// Cancel matching… on the jobs page, by queue and filter.
	queued := e.createJobs("digest", "weekly", 4, func(s *leaseholdv1.JobSpec) { s.Metadata = map[string]string{"batch": "7"} })
	kept := e.createJobs("digest", "weekly", 2, nil)
	e.open("jobs?queue=digest&filter=" + url.QueryEscape(`metadata.batch = "7"`))
	e.run("cancel matching", chromedp.Click(chromedp.CSS("#bulk-cancel")), chromedp.WaitVisible(chromedp.CSS("#dry-count")))
	if got := get(e, "the dry run's count", chromedp.Text(chromedp.CSS("#dry-count"))); got != "4" {
		t.Fatalf("the cancel dry run counts %s jobs, want 4", got)
	}
	e.run("confirm the cancel", chromedp.Click(chromedp.CSS("#bulk-confirm")))
	e.waitLocation("the cancel operation", "/operations/")
	e.waitLive("the cancel finishes", "#op-state", func(s string) bool { return s == "succeeded" })
	e.wantStates(queued, leaseholdv1.JobState_JOB_STATE_CANCELLED)
	e.wantStates(kept, leaseholdv1.JobState_JOB_STATE_QUEUED)
	e.open("operations")
	e.shot("operations")

	// A refused filter is shown on the dry-run page, with nothing to confirm.
	e.open("jobs?queue=digest&state=succeeded")
	e.run("cancel finished jobs", chromedp.Click(chromedp.CSS("#bulk-cancel")), chromedp.WaitVisible(chromedp.CSS("#bulk-error")))
	e.waitText("refused", "#bulk-error", func(s string) bool { return strings.Contains(s, "InvalidArgument") })
	if e.count("#bulk-confirm") != 0 {
		t.Fatal("a refused dry run offers a confirmation")
	}

	e.run("phone width", chromedp.EmulateViewport(390, 844))
	e.open("operations")
	e.shot("operations-390")
	e.run("desktop width", chromedp.EmulateViewport(1280, 900))

	e.bulkAsReader(other)
}

// bulkAsReader signs in as a reader: no bulk button on the jobs and
// dead-letter pages, no Cancel on an operation, and forged bulk POSTs
// refused.
func (e *env) bulkAsReader(dead []string) {
	e.t.Helper()
	admin := e.cookie()
	e.run("sign out", chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	e.signIn(newKey(e.t, e.st, store.RoleReader))
	ops, err := e.api.ops.ListOperations(e.api.ctx, &leaseholdv1.ListOperationsRequest{})
	if err != nil || len(ops.GetOperations()) == 0 {
		e.t.Fatalf("operations: %v, %v", ops, err)
	}
	opID := ops.GetOperations()[0].GetId()
	for _, p := range []string{"dead?queue=mailer", "jobs?queue=digest", "operations", "operations/" + opID} {
		e.open(p)
		if n := e.count(`main form[method="post"]`) + e.count(`[id^="bulk-"]`); n != 0 {
			e.t.Fatalf("a reader sees %d bulk or action controls on /ui/%s", n, p)
		}
	}
	e.open("dead?queue=mailer")
	e.shot("dead-reader")
	token := get(e, "the reader's CSRF token", chromedp.Value(chromedp.CSS(`form.who input[name="csrf"]`)))
	reader := e.cookie()
	for _, f := range []struct {
		path string
		form url.Values
	}{
		{"bulk/preview", url.Values{"action": {"replay"}, "queue": {"mailer"}}},
		{"bulk/start", url.Values{"action": {"replay"}, "filter": {`queue = "mailer"`}}},
		{"bulk/start", url.Values{"action": {"abandon"}, "filter": {`queue = "mailer"`}}},
	} {
		f.form.Set("csrf", token)
		code, body := e.post(f.path, f.form, reader)
		if code != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") {
			e.t.Fatalf("a reader's forged %s %v = %d %q; want 403 PermissionDenied", f.path, f.form, code, body)
		}
	}
	// Without a CSRF token even an admin's session is refused, before any call.
	code, body := e.post("bulk/start", url.Values{"action": {"abandon"}, "filter": {`queue = "mailer"`}}, admin)
	if code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		e.t.Fatalf("a bulk start without a CSRF token = %d %q; want 403", code, body)
	}
	for _, id := range dead {
		d, err := e.api.admin.GetDeadJob(e.api.ctx, &leaseholdv1.GetDeadJobRequest{JobId: id})
		if err != nil || d.GetDeadJob().GetAbandoned() || d.GetDeadJob().GetReplayedAs() != "" {
			e.t.Fatalf("dead job %s after the refused POSTs: %v, %v; want it untouched", id, d, err)
		}
	}
}

// waitLive is like waitText for a part of the page htmx replaces: it reads
// the text in one script, so a swap between finding the node and reading
// it cannot fail the read.
func (e *env) waitLive(what, sel string, want func(string) bool) string {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = get(e, what, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel)))
		if got != "" && want(got) {
			return got
		}
		time.Sleep(150 * time.Millisecond)
	}
	e.t.Fatalf("%s: %q is %q after 15s", what, sel, got)
	return got
}

// kill makes n dead jobs in queue, each failed once with code.
func (e *env) kill(queue, code string, n int) []string {
	e.t.Helper()
	ids := e.createJobs(queue, "send", n, func(s *leaseholdv1.JobSpec) { s.MaxAttempts = 1 })
	leased := e.claim(queue, n)
	if len(leased) != n {
		e.t.Fatalf("claimed %d jobs of %s, want %d", len(leased), queue, n)
	}
	for _, lj := range leased {
		if _, err := e.api.workers.Retry(e.api.ctx, &leaseholdv1.RetryRequest{Token: lj.GetToken(),
			Error: &leaseholdv1.JobError{Code: code, Message: "the relay said " + code, Retryable: true}}); err != nil {
			e.t.Fatal(err)
		}
	}
	return ids
}

// wantReplayed checks whether each dead job was replayed.
func (e *env) wantReplayed(ids []string, want bool) {
	e.t.Helper()
	for _, id := range ids {
		d, err := e.api.admin.GetDeadJob(e.api.ctx, &leaseholdv1.GetDeadJobRequest{JobId: id})
		if err != nil {
			e.t.Fatal(err)
		}
		if got := d.GetDeadJob().GetReplayedAs() != ""; got != want {
			e.t.Fatalf("dead job %s replayed = %v, want %v", id, got, want)
		}
	}
}

func (e *env) wantStates(ids []string, want leaseholdv1.JobState) {
	e.t.Helper()
	for _, id := range ids {
		j, err := e.api.jobs.GetJob(e.api.ctx, &leaseholdv1.GetJobRequest{JobId: id})
		if err != nil || j.GetJob().GetState() != want {
			e.t.Fatalf("job %s: %v, %v; want %v", id, j.GetJob().GetState(), err, want)
		}
	}
}

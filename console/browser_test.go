package console_test

// The console in a real browser: Debian's chromium, headless, driven by
// chromedp against a real coordinator on PostgreSQL with --auth api-key.
// Without chromium the test fails when CI=true (.ci/run installs it, so CI
// always runs it) and is skipped otherwise.
//
// Every page is saved as a screenshot under $LEASEHOLD_CONSOLE_SCREENSHOTS
// (a temporary directory when unset); docs/console/ holds the ones the
// README shows.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/store"
)

// chromium is the browser's path, or the test's end when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not on PATH, and CI=true: CI must run the console's browser test (.ci/run installs chromium)")
	}
	t.Skip("chromium is not on PATH: the console's browser test runs wherever chromium is installed (and always in CI)")
	return ""
}

// env is one coordinator, its console, a browser, and an admin's API
// client for setting the scene.
type env struct {
	t       *testing.T
	base    string // the console's URL, ending in /ui/
	browser context.Context
	api     apiClients
	shots   string
	st      store.Store
	// adminKey is an admin's API key.
	adminKey string
}

type apiClients struct {
	ctx       context.Context
	jobs      leaseholdv1.JobServiceClient
	admin     leaseholdv1.AdminServiceClient
	workers   leaseholdv1.WorkerServiceClient
	schedules leaseholdv1.ScheduleServiceClient
	ops       leaseholdv1.OperationServiceClient
}

func newEnv(t *testing.T) *env {
	t.Helper()
	path := chromium(t)
	srv := testserver.Start(t, testserver.Options{Postgres: true, Configure: func(cfg *coordinator.Config) {
		cfg.Auth = coordinator.AuthAPIKey
	}})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h, err := console.Handler(console.Config{
		Conn: conn, Auth: console.AuthAPIKey, SessionKey: srv.Coordinator.ConsoleSessionKey(), Prefix: "/ui/",
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", h)
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)

	shots := os.Getenv("LEASEHOLD_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)

	admin := newKey(t, srv.Store, store.RoleAdmin)
	actx2 := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+admin)
	e := &env{t: t, base: web.URL + "/ui/", browser: bctx, shots: shots, st: srv.Store, api: apiClients{
		ctx: actx2, jobs: leaseholdv1.NewJobServiceClient(conn), admin: leaseholdv1.NewAdminServiceClient(conn),
		workers: leaseholdv1.NewWorkerServiceClient(conn), schedules: leaseholdv1.NewScheduleServiceClient(conn),
		ops: leaseholdv1.NewOperationServiceClient(conn),
	}}
	e.adminKey = admin
	return e
}

// newKey makes a principal of role in the default tenant, offline, and
// returns its API key.
func newKey(t *testing.T, st store.Store, role store.Role) string {
	t.Helper()
	secret, hash, err := coordinator.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreatePrincipal(context.Background(), store.CreatePrincipalParams{
		Tenant: coordinator.TenantDefault, Role: role, Name: "console " + string(role), KeyHash: hash, Actor: "test",
	}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// run runs browser steps, failing the test on error.
func (e *env) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	if err := chromedp.Do(e.browser, steps...); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value.
func get[T any](e *env, what string, a chromedp.Action[T]) T {
	e.t.Helper()
	v, err := chromedp.Run(e.browser, a)
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// shot saves the page as name.png.
func (e *env) shot(name string) {
	e.t.Helper()
	png := get(e, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(e.shots, name+".png"), png, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// open navigates to path under the console and waits for its heading.
func (e *env) open(path string) {
	e.t.Helper()
	e.run("open "+path, chromedp.Navigate(e.base+path), chromedp.WaitVisible(chromedp.CSS("main h1")))
}

// text is sel's text, polled until want holds or 15s pass.
func (e *env) waitText(what, sel string, want func(string) bool) string {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		if e.count(sel) > 0 {
			got = get(e, what, chromedp.Text(chromedp.CSS(sel)))
			if want(got) {
				return got
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
	e.t.Fatalf("%s: %q is %q after 15s", what, sel, got)
	return got
}

// waitLocation waits until the page's URL contains part (a navigation
// has happened), for at most 15s.
func (e *env) waitLocation(what, part string) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		loc := get(e, "location", chromedp.Location())
		if strings.Contains(loc, part) {
			e.run(what, chromedp.WaitVisible(chromedp.CSS("main h1")))
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: the URL is %s after 15s", what, loc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// count is how many elements sel matches.
func (e *env) count(sel string) int {
	e.t.Helper()
	return get(e, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

// signIn signs in with key through the form.
func (e *env) signIn(key string) {
	e.t.Helper()
	e.run("sign in",
		chromedp.Navigate(e.base),
		chromedp.WaitVisible(chromedp.CSS("#api_key")),
		chromedp.SendKeys(chromedp.CSS("#api_key"), key),
		chromedp.Submit(chromedp.CSS("#api_key")),
		chromedp.WaitVisible(chromedp.CSS("nav")),
	)
}

// cookie is the browser's console session cookie.
func (e *env) cookie() *http.Cookie {
	e.t.Helper()
	res, err := chromedp.Call(e.browser, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		e.t.Fatal(err)
	}
	var ck *http.Cookie
	for _, c := range res.Cookies {
		if c.Name == "leasehold_console" {
			ck = &http.Cookie{Name: c.Name, Value: c.Value}
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				e.t.Fatalf("the session cookie is not HttpOnly and SameSite=Strict: %+v", c)
			}
		}
	}
	if ck == nil {
		e.t.Fatal("no session cookie")
	}
	return ck
}

// post sends a form as the browser's session would, but from Go: what a
// forged request looks like.
func (e *env) post(path string, form url.Values, ck *http.Cookie) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(ck)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func (e *env) createJobs(queue, kind string, n int, spec func(*leaseholdv1.JobSpec)) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		s := &leaseholdv1.JobSpec{Queue: queue, Kind: kind, Payload: fmt.Appendf(nil, `{"n":%d,"to":"user%d@example.com"}`, i, i)}
		if spec != nil {
			spec(s)
		}
		out, err := e.api.jobs.CreateJob(e.api.ctx, &leaseholdv1.CreateJobRequest{Job: s})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, out.GetJob().GetId())
	}
	return ids
}

// effect claims queue's job, saves a checkpoint and records a succeeded
// effect key for it.
func (e *env) effect(queue, key string) {
	e.t.Helper()
	for _, lj := range e.claim(queue, 1) {
		tok := lj.GetToken()
		for _, phase := range []string{"fetched", "rendered"} {
			if _, err := e.api.workers.SaveCheckpoint(e.api.ctx, &leaseholdv1.SaveCheckpointRequest{Token: tok, Phase: phase, State: []byte(`{"pages":3}`)}); err != nil {
				e.t.Fatal(err)
			}
		}
		if _, err := e.api.workers.ReserveEffect(e.api.ctx, &leaseholdv1.ReserveEffectRequest{Token: tok, EffectKey: key}); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.api.workers.RecordEffect(e.api.ctx, &leaseholdv1.RecordEffectRequest{Token: tok, EffectKey: key,
			Status: leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED, ProviderOperationId: "msg_42", Result: []byte(`{"accepted":true}`)}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) claim(queue string, n int) []*leaseholdv1.LeasedJob {
	e.t.Helper()
	out, err := e.api.workers.Claim(e.api.ctx, &leaseholdv1.ClaimRequest{WorkerId: "console-test-worker", Queues: []string{queue}, MaxJobs: int32(n)})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.GetJobs()
}

// TestConsoleInBrowser signs in with an admin's key, watches a queue fill
// and drain on the live overview, finds a job by filter and opens its
// timeline, replays a dead job, resets a breaker, sees a POST without a
// CSRF token refused, and then, signed in as a reader, sees no action
// buttons and has its forged POST refused by the coordinator.
func TestConsoleInBrowser(t *testing.T) {
	e := newEnv(t)

	// Sign-in: the console asks for a key and seals it in a strict cookie.
	e.run("open", chromedp.Navigate(e.base), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	e.shot("signin")
	// A wrong key is refused (and recorded in the audit log).
	e.run("a wrong key",
		chromedp.SendKeys(chromedp.CSS("#api_key"), coordinator.APIKeyPrefix+strings.Repeat("x", 43)),
		chromedp.Submit(chromedp.CSS("#api_key")),
		chromedp.WaitVisible(chromedp.CSS("p.err")))
	e.signIn(e.adminKey)
	admin := e.cookie()

	// A queue fills and drains, seen live on the overview (htmx polling).
	e.open("")
	e.createJobs("emails", "send", 20, nil)
	e.waitText("the queue fills", `tr[data-queue="emails"] .queued`, func(s string) bool { return s == "20" })
	e.waitText("it lags", `tr[data-queue="emails"] .lag`, func(s string) bool { return s != "0s" })
	e.shot("overview")
	for _, lj := range e.claim("emails", 20) {
		if _, err := e.api.workers.Complete(e.api.ctx, &leaseholdv1.CompleteRequest{Token: lj.GetToken(), Result: []byte(`{"sent":true}`)}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitText("the queue drains", `tr[data-queue="emails"] .succeeded`, func(s string) bool { return s == "20" })
	e.waitText("nothing left", `tr[data-queue="emails"] .depth`, func(s string) bool { return s == "0" })
	e.waitText("no lag", `tr[data-queue="emails"] .lag`, func(s string) bool { return s == "0s" })

	// Find a job by filter and open its timeline.
	ids := e.createJobs("billing", "invoice", 1, func(s *leaseholdv1.JobSpec) { s.Metadata = map[string]string{"customer": "acme"} })
	e.effect("billing", "send-invoice")
	e.open("jobs")
	e.shot("jobs")
	e.run("filter",
		chromedp.SendKeys(chromedp.CSS(`input[name="queue"]`), "billing"),
		chromedp.SendKeys(chromedp.CSS(`input[name="kind"]`), "invoice"),
		chromedp.Submit(chromedp.CSS(`input[name="queue"]`)))
	e.waitLocation("the filtered list", "kind=invoice")
	e.run("open the job",
		chromedp.WaitVisible(chromedp.CSS(`a[href$="/jobs/`+ids[0]+`"]`)),
		chromedp.Click(chromedp.CSS(`a[href$="/jobs/`+ids[0]+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#timeline")),
	)
	e.waitText("the timeline", "#timeline", func(s string) bool { return strings.Contains(s, "queued") && strings.Contains(s, "leased") })
	e.waitText("the checkpoint history", "#checkpoints", func(s string) bool { return strings.Index(s, "rendered") < strings.Index(s, "fetched") })
	e.waitText("the effect ledger", "#effects", func(s string) bool { return strings.Contains(s, "send-invoice") && strings.Contains(s, "succeeded") })
	e.shot("job")
	e.findByFilter(ids[0])

	e.replayDeadJob()
	e.resetBreaker()
	e.otherPages()
	e.editPolicy()

	// A POST without a CSRF token is refused, and changes nothing.
	if code, body := e.post("queues/pause", url.Values{"queue": {"emails"}}, admin); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("pause without a CSRF token = %d %q; want 403", code, body)
	}
	e.wantPaused("emails", false)

	e.asReader()
}

// findByFilter finds a job by a filter string typed in the jobs page's
// filter box, then types a bad filter and sees the coordinator's reason.
func (e *env) findByFilter(id string) {
	e.t.Helper()
	e.createJobs("billing", "invoice", 2, func(s *leaseholdv1.JobSpec) { s.Metadata = map[string]string{"customer": "globex"} })
	e.open("jobs")
	e.run("find a job by filter",
		chromedp.SendKeys(chromedp.CSS(`input[name="filter"]`), `queue = billing AND metadata.customer = "acme"`),
		chromedp.Submit(chromedp.CSS(`input[name="filter"]`)))
	e.waitLocation("the list found by filter", "filter=")
	e.run("the job found", chromedp.WaitVisible(chromedp.CSS(`a[href$="/jobs/`+id+`"]`)))
	if n := e.count("table.jobs tbody tr"); n != 1 {
		e.t.Fatalf("the filter customer = acme lists %d jobs, want 1", n)
	}
	if v := get(e, "the filter box", chromedp.Value(chromedp.CSS(`input[name="filter"]`))); v != `queue = billing AND metadata.customer = "acme"` {
		e.t.Errorf("the filter box holds %q after the search", v)
	}
	e.shot("jobs-filtered")
	e.run("a bad filter",
		chromedp.SetValue(chromedp.CSS(`input[name="filter"]`), `state = SLEEPING`),
		chromedp.Submit(chromedp.CSS(`input[name="filter"]`)))
	e.waitText("the filter's error", "#filter-error", func(s string) bool {
		return strings.Contains(s, "InvalidArgument") && strings.Contains(s, "SLEEPING")
	})
	if n := e.count("table.jobs tbody tr"); n != 0 {
		e.t.Errorf("a refused filter still lists %d jobs", n)
	}
	e.shot("jobs-bad-filter")
}

// replayDeadJob kills a job (one attempt, a retryable failure) and
// replays it from the dead-letter page.
func (e *env) replayDeadJob() {
	e.t.Helper()
	ids := e.createJobs("fragile", "flaky", 1, func(s *leaseholdv1.JobSpec) { s.MaxAttempts = 1 })
	for _, lj := range e.claim("fragile", 1) {
		if _, err := e.api.workers.Retry(e.api.ctx, &leaseholdv1.RetryRequest{Token: lj.GetToken(),
			Error: &leaseholdv1.JobError{Code: "upstream_timeout", Message: "the mail relay timed out", Retryable: true}}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.open("dead")
	e.run("the dead job is listed", chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+ids[0]+`"]`)))
	e.shot("dead")
	e.run("replay",
		chromedp.Click(chromedp.CSS(`tr[data-job="`+ids[0]+`"] button[aria-label^="Replay"]`)),
		chromedp.WaitVisible(chromedp.CSS(".msg")),
	)
	msg := e.waitText("replayed", ".msg", func(s string) bool { return strings.Contains(s, "Replayed "+ids[0]) })
	e.t.Logf("after replay: %s", msg)
	dead, err := e.api.admin.GetDeadJob(e.api.ctx, &leaseholdv1.GetDeadJobRequest{JobId: ids[0]})
	if err != nil || dead.GetDeadJob().GetReplayedAs() == "" {
		e.t.Fatalf("the dead job after the console's replay: %v, %v", dead, err)
	}
}

// resetBreaker forces a breaker open through the API and resets it from
// the breakers page.
func (e *env) resetBreaker() {
	e.t.Helper()
	e.createJobs("payments", "charge", 1, func(s *leaseholdv1.JobSpec) { s.Dependency = "stripe" })
	if _, err := e.api.admin.ForceOpenBreaker(e.api.ctx, &leaseholdv1.ForceOpenBreakerRequest{
		Dependency: "stripe", Duration: durationpb.New(time.Hour), Reason: "maintenance"}); err != nil {
		e.t.Fatal(err)
	}
	e.open("breakers")
	e.waitText("open", `tr[data-dependency="stripe"] .badge`, func(s string) bool { return s == "open" })
	e.shot("breakers")
	e.run("reset", chromedp.Click(chromedp.CSS(`tr[data-dependency="stripe"] button[aria-label="Reset stripe"]`)),
		chromedp.WaitVisible(chromedp.CSS(".msg")))
	e.waitText("closed", `tr[data-dependency="stripe"] .badge`, func(s string) bool { return s == "closed" })
	// Its history shows both transitions.
	e.open("breakers/history?dependency=stripe")
	e.waitText("history", "#breaker-history", func(s string) bool {
		return strings.Contains(s, "forced_open") && strings.Contains(s, "reset")
	})
	e.shot("breaker-history")
}

// otherPages opens every other page and saves it, and the overview and a
// job at a phone's width.
func (e *env) otherPages() {
	e.t.Helper()
	if _, err := e.api.schedules.CreateSchedule(e.api.ctx, &leaseholdv1.CreateScheduleRequest{Name: "nightly-report", Spec: &leaseholdv1.ScheduleSpec{
		Queue: "reports", Kind: "daily", Cron: "0 2 * * *"}}); err != nil {
		e.t.Fatal(err)
	}
	for _, p := range []string{"queues", "workers", "schedules", "keys", "audit"} {
		e.open(p)
		e.shot(p)
	}
	// The audit page shows the refused sign-in and the admin's.
	e.waitText("sign-ins audited", "table.audit", func(s string) bool {
		return strings.Contains(s, "console_sign_in_refused") && strings.Contains(s, "invalid_key") &&
			strings.Contains(s, "console_sign_in") && strings.Contains(s, "console admin")
	})
	audit, err := e.api.admin.ListAuditEvents(e.api.ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	var signedIn, refused int
	for _, ev := range audit.GetEvents() {
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN && ev.GetActorName() == "console admin" {
			signedIn++
		}
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN_REFUSED && strings.Contains(ev.GetDataJson(), `"invalid_key"`) {
			refused++
		}
	}
	if signedIn != 1 || refused != 1 {
		e.t.Fatalf("audit log: %d sign-ins of the admin and %d refused ones, want 1 and 1", signedIn, refused)
	}
	// The billing job's lease is held by the test's worker.
	e.open("workers")
	e.waitText("held leases", "table.held", func(s string) bool { return strings.Contains(s, "console-test-worker") })
	// A key is shown once, on creation.
	e.open("keys")
	e.run("create a key",
		chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "reporting"),
		chromedp.SetValue(chromedp.CSS(`select[name="role"]`), "reader"),
		chromedp.Submit(chromedp.CSS(`input[name="name"]`)),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	secret := get(e, "the new key", chromedp.Value(chromedp.CSS("#new-key")))
	if !strings.HasPrefix(secret, coordinator.APIKeyPrefix) {
		e.t.Fatalf("the new key shown is %q", secret)
	}
	e.open("keys")
	if e.count("#new-key") != 0 {
		e.t.Fatal("the key is shown again")
	}
	e.run("phone width", chromedp.EmulateViewport(390, 844))
	e.open("")
	e.shot("overview-390")
	e.open("dead?abandoned=1")
	e.shot("dead-390")
	e.run("desktop width", chromedp.EmulateViewport(1280, 900))
}

// editPolicy sets a queue's concurrency and rate limits from the policy
// form reached from the queues page; the retry attempts it leaves as they
// were stay stored.
func (e *env) editPolicy() {
	e.t.Helper()
	before, err := e.api.admin.GetQueue(e.api.ctx, &leaseholdv1.GetQueueRequest{Queue: "emails"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.open("queues")
	e.run("edit the policy",
		chromedp.Click(chromedp.CSS(`a[aria-label="Edit the policy of emails"]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name="concurrency_limit"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="concurrency_limit"]`), "3"),
		chromedp.SetValue(chromedp.CSS(`input[name="rate_limit_starts"]`), "10"),
		chromedp.SetValue(chromedp.CSS(`input[name="rate_limit_interval"]`), "1s"),
		chromedp.Click(chromedp.CSS(`form.policy button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(".msg")))
	e.waitText("saved", ".msg", func(s string) bool { return strings.Contains(s, "Saved the policy of emails") })
	e.shot("policy")
	got, err := e.api.admin.GetQueue(e.api.ctx, &leaseholdv1.GetQueueRequest{Queue: "emails"})
	if err != nil {
		e.t.Fatal(err)
	}
	p := got.GetQueue().GetPolicy()
	if p.GetConcurrencyLimit() != 3 || p.GetRateLimit().GetStarts() != 10 || p.GetRateLimit().GetInterval().AsDuration() != time.Second ||
		p.GetRetry().GetMaxAttempts() != before.GetQueue().GetPolicy().GetRetry().GetMaxAttempts() {
		e.t.Fatalf("emails' policy after the form: %v; want concurrency 3, 10 starts per 1s, max attempts kept (%d)",
			p, before.GetQueue().GetPolicy().GetRetry().GetMaxAttempts())
	}
}

func (e *env) wantPaused(queue string, want bool) {
	e.t.Helper()
	q, err := e.api.admin.GetQueue(e.api.ctx, &leaseholdv1.GetQueueRequest{Queue: queue})
	if err != nil || q.GetQueue().GetPolicy().GetPaused() != want {
		e.t.Fatalf("queue %s: %v, %v; want paused %v", queue, q, err, want)
	}
}

// asReader signs out, signs in as a reader, finds no action buttons, and
// has a forged pause (with a valid CSRF token) refused by the coordinator.
func (e *env) asReader() {
	e.t.Helper()
	e.run("sign out", chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.CSS("#api_key")))
	e.signIn(newKey(e.t, e.st, store.RoleReader))
	for _, p := range []string{"", "queues", "queues/policy?queue=emails", "dead?abandoned=1", "breakers", "schedules"} {
		e.open(p)
		if n := e.count(`main form[method="post"]`); n != 0 {
			e.t.Fatalf("a reader sees %d action forms on /ui/%s", n, p)
		}
	}
	if e.count(`a[href$="/keys"]`)+e.count(`a[href$="/audit"]`) != 0 {
		e.t.Fatal("a reader is offered the keys or audit page")
	}
	e.open("queues")
	e.shot("queues-reader")
	token := get(e, "the reader's CSRF token", chromedp.Value(chromedp.CSS(`form.who input[name="csrf"]`)))
	code, body := e.post("queues/pause", url.Values{"queue": {"emails"}, "csrf": {token}}, e.cookie())
	if code != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") {
		e.t.Fatalf("a reader's forged pause = %d %q; want 403 PermissionDenied", code, body)
	}
	e.wantPaused("emails", false)
	code, body = e.post("queues/policy", url.Values{"queue": {"emails"}, "concurrency_limit": {"1"}, "csrf": {token}}, e.cookie())
	if code != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") {
		e.t.Fatalf("a reader's forged policy = %d %q; want 403 PermissionDenied", code, body)
	}
	if q, err := e.api.admin.GetQueue(e.api.ctx, &leaseholdv1.GetQueueRequest{Queue: "emails"}); err != nil || q.GetQueue().GetPolicy().GetConcurrencyLimit() != 3 {
		e.t.Fatalf("emails after a reader's forged policy: %v, %v; want the concurrency limit 3 the admin set", q, err)
	}

	// Revoking the key ends its session at the next request.
	keys, err := e.api.admin.ListApiKeys(e.api.ctx, &leaseholdv1.ListApiKeysRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range keys.GetPrincipals() {
		if p.GetRole() == leaseholdv1.Role_ROLE_READER && p.GetName() == "console reader" {
			if _, err := e.api.admin.RevokeApiKey(e.api.ctx, &leaseholdv1.RevokeApiKeyRequest{Id: p.GetId()}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.open("queues")
		if loc := get(e, "location", chromedp.Location()); strings.Contains(loc, "/signin?ended=1") {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the session of a revoked key still works after 10s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/otlptest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// cleanEnv is this process's environment without LEASEHOLD_* and OTEL_*
// (a developer's own settings must not leak into the processes under
// test), plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") &&
			!strings.HasPrefix(kv, "TRACEPARENT=") && !strings.HasPrefix(kv, "TRACESTATE=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func spanID(b []byte) string { return hex.EncodeToString(b) }

// TestOneTraceAcrossProcesses follows one job through four processes that
// all export to one OTLP receiver: a traced script's context handed to
// `leasehold job create` (TRACEPARENT), the CreateJob call into `leasehold
// serve`, the lease, and the handler in `leasehold worker exec`, whose
// program gets the handler's context in TRACEPARENT.
//
//	script ─ job create ─ CreateJob (client) ─ CreateJob (server)
//	            ╰┄ link ┄ lease push (serve)
//	            ╰┄ link ┄ handler (worker exec) ─ the program, ─ Complete
func TestOneTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	col := otlptest.Start(t)
	otelEnv := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.HTTPEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRICS_EXPORTER=none",
	}
	p := testserver.StartProcessEnv(t, otelEnv)
	bin := testserver.Binary(t)
	const (
		scriptTrace = "0af7651916cd43dd8448eb211c80319c"
		scriptSpan  = "b7ad6b7169203331"
	)

	create := exec.Command(bin, "--addr", p.Addr, "--output", "json", "job", "create", "--queue", "traced", "--kind", "thumb", "--payload", "{}")
	create.Env = cleanEnv(append(otelEnv, "TRACEPARENT=00-"+scriptTrace+"-"+scriptSpan+"-01")...)
	var stderr bytes.Buffer
	create.Stderr = &stderr
	out, err := create.Output()
	if err != nil {
		t.Fatalf("job create: %v\n%s", err, stderr.String())
	}
	var created leaseholdv1.CreateJobResponse
	if err := protojson.Unmarshal(out, &created); err != nil {
		t.Fatalf("job create output %q: %v", out, err)
	}
	job := created.GetJob()

	w := exec.Command(bin, "worker", "exec", "--addr", p.Addr, "--queue", "traced", "--worker-id", "traced-worker",
		"--", "sh", "-c", `printf '%s' "$TRACEPARENT"`)
	w.Env = cleanEnv(otelEnv...)
	var wout bytes.Buffer
	w.Stdout, w.Stderr = &wout, &wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := worker.NewClient(p.Dial(t))
	if err := client.Watch(ctx, job.GetId(), func(*leaseholdv1.Event) error { return nil }); err != nil {
		_ = w.Process.Kill()
		t.Fatalf("watch %s: %v\n%s", job.GetId(), err, wout.String())
	}
	final, err := client.Get(ctx, job.GetId())
	if err != nil || final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job after the worker ran it: %v, %v\n%s", final, err, wout.String())
	}
	programTraceparent := string(final.GetResult())
	// Stop both long-running processes; each flushes its spans on exit.
	_ = w.Process.Signal(syscall.SIGTERM)
	if err := w.Wait(); err != nil {
		t.Errorf("worker exec: %v\n%s", err, wout.String())
	}
	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(); code != exitOK || err != nil {
		t.Errorf("serve exited %d, %v", code, err)
	}

	spans := col.Spans()
	find := func(ok func(otlptest.Span) bool) *otlptest.Span {
		for _, s := range spans {
			if ok(s) {
				return &s
			}
		}
		return nil
	}
	must := func(what string, s *otlptest.Span) otlptest.Span {
		t.Helper()
		if s == nil {
			var names []string
			for _, s := range spans {
				names = append(names, s.Resource["service.name"]+":"+s.GetName())
			}
			t.Fatalf("no %s among the spans %v\nworker exec:\n%s", what, names, wout.String())
		}
		return *s
	}
	cmdSpan := must("command span", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold job create" && s.Resource["service.name"] == "leasehold-cli"
	}))
	if got := spanID(cmdSpan.GetTraceId()); got != scriptTrace {
		t.Errorf("command span in trace %s, want the script's %s (TRACEPARENT)", got, scriptTrace)
	}
	if got := spanID(cmdSpan.GetParentSpanId()); got != scriptSpan {
		t.Errorf("command span's parent %s, want the script's span %s", got, scriptSpan)
	}
	call := must("CreateJob client span", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.v1.JobService/CreateJob" && s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT
	}))
	if spanID(call.GetParentSpanId()) != spanID(cmdSpan.GetSpanId()) {
		t.Errorf("CreateJob client span's parent %x, want the command span %x", call.GetParentSpanId(), cmdSpan.GetSpanId())
	}
	server := must("CreateJob server span", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.v1.JobService/CreateJob" && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER
	}))
	if server.Resource["service.name"] != "leasehold" || spanID(server.GetTraceId()) != scriptTrace ||
		spanID(server.GetParentSpanId()) != spanID(call.GetSpanId()) {
		t.Errorf("CreateJob server span (%s, trace %x, parent %x) does not continue the client span %x",
			server.Resource["service.name"], server.GetTraceId(), server.GetParentSpanId(), call.GetSpanId())
	}
	if want := "00-" + scriptTrace + "-" + spanID(cmdSpan.GetSpanId()) + "-01"; job.GetMetadata()["traceparent"] != want {
		t.Errorf("job metadata traceparent %q, want the command span's %q", job.GetMetadata()["traceparent"], want)
	}
	linksTo := func(s otlptest.Span, target otlptest.Span) bool {
		for _, l := range s.GetLinks() {
			if bytes.Equal(l.GetSpanId(), target.GetSpanId()) && bytes.Equal(l.GetTraceId(), target.GetTraceId()) {
				return true
			}
		}
		return false
	}
	handler := must("handler span", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.job thumb" && s.Attr("leasehold.job.id") == job.GetId()
	}))
	if handler.Resource["service.name"] != "leasehold-worker" || !linksTo(handler, cmdSpan) {
		t.Errorf("handler span (%s) links %v, want a link to the command span %x",
			handler.Resource["service.name"], handler.GetLinks(), cmdSpan.GetSpanId())
	}
	if want := "00-" + spanID(handler.GetTraceId()) + "-" + spanID(handler.GetSpanId()) + "-01"; programTraceparent != want {
		t.Errorf("the program's TRACEPARENT %q, want the handler span's %q", programTraceparent, want)
	}

	push := find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.lease.push" && s.Attr("leasehold.job.id") == job.GetId()
	})
	if push == nil || !linksTo(*push, cmdSpan) {
		t.Errorf("lease push span %v, want one linked to the command span", push)
	}
	report := find(func(s otlptest.Span) bool {
		return bytes.Equal(s.GetTraceId(), handler.GetTraceId()) && bytes.Equal(s.GetParentSpanId(), handler.GetSpanId()) &&
			strings.Contains(s.GetName(), "Complete")
	})
	if report == nil {
		t.Fatalf("no Complete span under the handler span %x", handler.GetSpanId())
	}
	// The Complete went on the Connect stream: the coordinator's span of
	// it is a child of the worker's report span, and the group commit
	// that applied it links to that span (not to the Connect span).
	streamReport := must("coordinator's span of the streamed report", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.stream.report Complete" && s.Attr("leasehold.job.id") == job.GetId()
	}))
	if streamReport.Resource["service.name"] != "leasehold" || !bytes.Equal(streamReport.GetTraceId(), report.GetTraceId()) ||
		!bytes.Equal(streamReport.GetParentSpanId(), report.GetSpanId()) {
		t.Errorf("streamed report span (%s, trace %x, parent %x), want a child of the worker's report span %x in trace %x",
			streamReport.Resource["service.name"], streamReport.GetTraceId(), streamReport.GetParentSpanId(), report.GetSpanId(), report.GetTraceId())
	}
	must("commit span linked to the streamed report", find(func(s otlptest.Span) bool {
		return s.GetName() == "leasehold.commit reports" && linksTo(s, streamReport)
	}))
}

package main

// The environment of one job's program: the worker's own, minus job
// variables it inherited, plus the job's identity, metadata and trace
// context.

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/leasehold/leasehold/worker"
)

// childEnv is the worker's environment, minus any LEASEHOLD_ job variables
// it inherited (they would describe some other job), plus this job's.
func childEnv(ctx context.Context, base []string, job *worker.Job) []string {
	env := make([]string, 0, len(base)+8+len(job.Metadata))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if isJobEnvName(name) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"LEASEHOLD_JOB_ID="+job.ID,
		"LEASEHOLD_JOB_KIND="+job.Kind,
		"LEASEHOLD_JOB_QUEUE="+job.Queue,
		"LEASEHOLD_ATTEMPT="+strconv.Itoa(int(job.Attempt)),
		"LEASEHOLD_MAX_ATTEMPTS="+strconv.Itoa(int(job.MaxAttempts)),
		"LEASEHOLD_LEASE_GENERATION="+strconv.FormatInt(job.Token.Generation, 10),
	)
	env = append(env, metaEnv(job.Metadata)...)
	// Trace context in the OpenTelemetry environment carrier (TRACEPARENT,
	// TRACESTATE) so an instrumented program joins the trace: the handler
	// span's when this process traces, otherwise the producer's from the
	// job metadata.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if carrier.Get("traceparent") == "" {
		carrier = propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(
			propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(job.Metadata)), carrier)
	}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier.Get(k); v != "" {
			env = append(env, strings.ToUpper(k)+"="+v)
		}
	}
	return env
}

// isJobEnvName reports the variables worker exec sets per job.
func isJobEnvName(name string) bool {
	switch name {
	case "LEASEHOLD_JOB_ID", "LEASEHOLD_JOB_KIND", "LEASEHOLD_JOB_QUEUE", "LEASEHOLD_ATTEMPT",
		"LEASEHOLD_MAX_ATTEMPTS", "LEASEHOLD_LEASE_GENERATION", "TRACEPARENT", "TRACESTATE":
		return true
	}
	return strings.HasPrefix(name, "LEASEHOLD_META_")
}

// metaEnv turns metadata into LEASEHOLD_META_<KEY> variables: the key
// upper-cased, every character other than A-Z and 0-9 replaced by "_".
// When two keys map to the same name, the one that sorts last wins, so the
// result does not depend on map order. Values with NUL bytes cannot be
// passed in an environment and are left out (the API refuses them anyway).
func metaEnv(meta map[string]string) []string {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	byName := make(map[string]string, len(keys))
	var names []string
	for _, k := range keys {
		v := meta[k]
		if strings.IndexByte(v, 0) >= 0 {
			continue
		}
		name := metaEnvName(k)
		if _, seen := byName[name]; !seen {
			names = append(names, name)
		}
		byName[name] = v
	}
	env := make([]string, len(names))
	for i, n := range names {
		env[i] = n + "=" + byName[n]
	}
	return env
}

// metaEnvName is the variable name for a metadata key.
func metaEnvName(key string) string {
	var b strings.Builder
	b.WriteString("LEASEHOLD_META_")
	for _, r := range strings.ToUpper(key) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

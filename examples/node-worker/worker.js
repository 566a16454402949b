#!/usr/bin/env node
// A Leasehold worker in Node.js, driven by the proto alone.
//
// It uses only the unary WorkerService calls (Claim, Renew, Complete, Retry,
// Cancel, Release) so that any gRPC stack can copy it line by line; the
// streaming Connect protocol is an optimisation, not a requirement.
//
// The loop, per concurrency slot:
//
//   1. Claim one job with a long-poll wait (an empty answer just means "ask
//      again").
//   2. Renew the lease every third of its duration while the handler runs.
//      A renewal answered LOST (or LEASE_LOST) or CANCEL_REQUESTED aborts the
//      handler through its AbortSignal.
//   3. Report the outcome with the lease's fencing token: Complete with a
//      result, Retry with a classified error, Cancel to acknowledge a cancel
//      request, or Release on shutdown. A FAILED_PRECONDITION answer with the
//      ErrorInfo reason LEASE_LOST means another generation owns the job now:
//      drop it and publish nothing more for it.
//
// The coordinator is the only clock: the worker never decides on its own that
// a lease has expired, it lets the coordinator fence late reports.
//
// Configuration (environment):
//
//   LEASEHOLD_ADDR            coordinator address (default 127.0.0.1:7400)
//   LEASEHOLD_QUEUE           queue(s) to work, comma-separated (required)
//   LEASEHOLD_WORKER_ID       worker identity (default node-<host>-<pid>)
//   LEASEHOLD_MAX_JOBS        exit 0 after handling this many jobs (default: run until SIGTERM)
//   LEASEHOLD_CONCURRENCY     jobs handled at once (default 1)
//   LEASEHOLD_LEASE_SECONDS   lease duration asked for, in [1, 3600] (default 30)
//   LEASEHOLD_WAIT_SECONDS    Claim long-poll wait, in [0, 60] (default 20)
//   LEASEHOLD_PROTO_DIR       the proto include directory (default ../../proto)
//   LEASEHOLD_API_KEY         API key sent as "authorization: Bearer <key>" (a worker-role key)
//   LEASEHOLD_TLS             "1" or "true": connect with TLS, trusting the system roots
//   LEASEHOLD_TLS_CA_FILE     PEM CA bundle to verify the coordinator with (implies TLS)
//   LEASEHOLD_TLS_CERT_FILE   client certificate for mTLS (implies TLS; with LEASEHOLD_TLS_KEY_FILE)
//   LEASEHOLD_TLS_KEY_FILE    the client certificate's key
//   LEASEHOLD_TLS_SERVER_NAME name to verify the coordinator's certificate against
//
// An API key is never sent in clear text beyond loopback: with
// LEASEHOLD_API_KEY set and no TLS, LEASEHOLD_ADDR must be a loopback address.
//
// Logs are JSON lines on stdout. Exit codes: 0 clean stop, 1 fatal error,
// 2 bad configuration.
'use strict';

const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

// ---------------------------------------------------------------------------
// The handler: replace this with your business logic.
// ---------------------------------------------------------------------------

// JobFailure is how a handler classifies a failure. retryable=false ends the
// job as FAILED; retryable=true lets the queue policy reschedule it (or make
// it DEAD when the attempt budget is spent). retryAfterMs is honoured by the
// coordinator when it is longer than the computed backoff.
class JobFailure extends Error {
  constructor(code, message, { retryable = true, retryAfterMs = 0 } = {}) {
    super(message);
    this.name = 'JobFailure';
    this.code = code;
    this.retryable = retryable;
    this.retryAfterMs = retryAfterMs;
  }
}

// handle runs one attempt of a job and returns the result to store with
// Complete (any JSON value). It must stop promptly when ctx.signal aborts:
// the lease is gone, a client cancelled the job, or the worker is shutting
// down. The demo understands a JSON object payload:
//
//   {"work_ms": 2500}               pretend to work that long (heartbeats keep the lease)
//   {"fail": true}                  fail retryably with DEMO_TRANSIENT and a 250 ms retry-after
//   {"partition_on_attempt": 1}     withhold heartbeats on that attempt, as a network
//                                   partition would, so a long job loses its lease
//
// A payload that is not a JSON object fails non-retryably (BAD_PAYLOAD):
// no retry can fix it.
async function handle(job, ctx) {
  let input;
  try {
    input = JSON.parse(job.payload.length > 0 ? job.payload.toString('utf8') : '{}');
  } catch (err) {
    throw new JobFailure('BAD_PAYLOAD', `payload is not JSON: ${err.message}`, { retryable: false });
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new JobFailure('BAD_PAYLOAD', 'payload must be a JSON object', { retryable: false });
  }
  if (input.partition_on_attempt === job.attempts) {
    ctx.log.info('demo: withholding heartbeats for this attempt');
    ctx.pauseHeartbeats();
  }
  if (Number.isFinite(input.work_ms) && input.work_ms > 0) {
    await sleep(input.work_ms, ctx.signal);
  }
  if (input.fail === true) {
    throw new JobFailure('DEMO_TRANSIENT', `demo failure on attempt ${job.attempts}`, {
      retryable: true,
      retryAfterMs: Number.isFinite(input.retry_after_ms) ? input.retry_after_ms : 250,
    });
  }
  return { kind: job.kind, attempt: job.attempts, renewals: ctx.renewals(), echo: input };
}

// ---------------------------------------------------------------------------
// Plumbing: configuration, the gRPC client, errors.
// ---------------------------------------------------------------------------

// How long unary calls other than Claim may take before the worker gives up
// on the answer. Reports are retried (see publish), so this only bounds one
// try.
const CALL_TIMEOUT_MS = 10_000;
// Extra time a Claim gets beyond its long-poll wait for the answer to come
// back, so the client deadline never cuts off a wait the server honours.
const CLAIM_DEADLINE_MARGIN_MS = 10_000;
// Backoff between failed Claim calls (coordinator down or restarting).
const CLAIM_BACKOFF_BASE_MS = 200;
const CLAIM_BACKOFF_MAX_MS = 5_000;
// Tries for a report (Complete, Retry, Cancel, Release) that fails with a
// transient error. Repeating a report is safe: the coordinator answers a
// repeated report of the generation that already succeeded with the same
// result.
const PUBLISH_TRIES = 5;

class ConfigError extends Error {}

function intEnv(env, name, def, min, max) {
  const raw = env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ConfigError(`${name}=${JSON.stringify(raw)}: want an integer in [${min}, ${max}]`);
  }
  return n;
}

function loadConfig(env) {
  const queues = (env.LEASEHOLD_QUEUE || '').split(',').map((q) => q.trim()).filter(Boolean);
  if (queues.length === 0) throw new ConfigError('LEASEHOLD_QUEUE is required (one queue or a comma-separated list)');
  return {
    addr: env.LEASEHOLD_ADDR || '127.0.0.1:7400',
    queues,
    workerId: env.LEASEHOLD_WORKER_ID || `node-${os.hostname()}-${process.pid}`,
    maxJobs: intEnv(env, 'LEASEHOLD_MAX_JOBS', 0, 1, Number.MAX_SAFE_INTEGER),
    concurrency: intEnv(env, 'LEASEHOLD_CONCURRENCY', 1, 1, 1000),
    leaseMs: intEnv(env, 'LEASEHOLD_LEASE_SECONDS', 30, 1, 3600) * 1000,
    waitMs: intEnv(env, 'LEASEHOLD_WAIT_SECONDS', 20, 0, 60) * 1000,
    protoDir: env.LEASEHOLD_PROTO_DIR || path.join(__dirname, '..', '..', 'proto'),
    ...securityConfig(env),
  };
}

// securityConfig reads the TLS and API key settings. The same variables
// configure the leasehold CLI and the Go SDK.
function securityConfig(env) {
  const tls = {
    caFile: env.LEASEHOLD_TLS_CA_FILE || '',
    certFile: env.LEASEHOLD_TLS_CERT_FILE || '',
    keyFile: env.LEASEHOLD_TLS_KEY_FILE || '',
    serverName: env.LEASEHOLD_TLS_SERVER_NAME || '',
  };
  if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) {
    throw new ConfigError('LEASEHOLD_TLS_CERT_FILE and LEASEHOLD_TLS_KEY_FILE go together');
  }
  tls.on = ['1', 'true'].includes((env.LEASEHOLD_TLS || '').toLowerCase()) || Boolean(tls.caFile || tls.certFile);
  return { tls, apiKey: env.LEASEHOLD_API_KEY || '' };
}

// isLoopback reports whether host:port names a loopback host.
function isLoopback(addr) {
  let host = addr.replace(/^dns:(\/\/\/)?/, '');
  const m = /^\[([^\]]+)\](:\d+)?$/.exec(host);
  host = m ? m[1] : host.replace(/:\d+$/, '');
  if (host.toLowerCase() === 'localhost') return true;
  if (net.isIPv4(host)) return host.startsWith('127.');
  return net.isIPv6(host) && (host === '::1' || host === '0:0:0:0:0:0:0:1');
}

// channel builds the client's channel credentials and options: TLS (with a
// client certificate for mTLS) when configured, and an interceptor that
// adds the API key to every call.
function channel(cfg) {
  const read = (f) => (f ? fs.readFileSync(f) : null);
  let creds;
  const options = {};
  if (cfg.tls.on) {
    creds = grpc.credentials.createSsl(read(cfg.tls.caFile), read(cfg.tls.keyFile), read(cfg.tls.certFile));
    if (cfg.tls.serverName) {
      options['grpc.ssl_target_name_override'] = cfg.tls.serverName;
      options['grpc.default_authority'] = cfg.tls.serverName;
    }
  } else {
    if (cfg.apiKey && !isLoopback(cfg.addr)) {
      throw new ConfigError(`refusing to send LEASEHOLD_API_KEY without TLS to ${cfg.addr}: set LEASEHOLD_TLS_CA_FILE (or LEASEHOLD_TLS=1)`);
    }
    creds = grpc.credentials.createInsecure();
  }
  if (cfg.apiKey) {
    const bearer = `Bearer ${cfg.apiKey}`;
    options.interceptors = [
      (callOptions, nextCall) => new grpc.InterceptingCall(nextCall(callOptions), {
        start(metadata, listener, next) {
          metadata.set('authorization', bearer);
          next(metadata, listener);
        },
      }),
    ];
  }
  return { creds, options };
}

// loadWorkerService loads leasehold.v1.WorkerService straight from the .proto
// files. proto-loader resolves google/protobuf/{duration,timestamp}.proto
// from the copies protobufjs ships. keepCase keeps the proto's snake_case
// field names, as in the API docs and grpcurl; longs as strings keep int64
// lease generations exact.
function loadWorkerService(protoDir) {
  const def = protoLoader.loadSync('leasehold/v1/worker_service.proto', {
    includeDirs: [protoDir],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def).leasehold.v1.WorkerService;
}

// The rich error model (google.rpc.Status in grpc-status-details-bin). Only
// the fields the worker reads are declared; protobuf skips the rest.
const rpcTypes = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Any: { fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } } },
          },
        },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: 'int32', id: 1 },
                message: { type: 'string', id: 2 },
                details: { rule: 'repeated', type: 'google.protobuf.Any', id: 3 },
              },
            },
            ErrorInfo: {
              fields: {
                reason: { type: 'string', id: 1 },
                domain: { type: 'string', id: 2 },
                metadata: { keyType: 'string', type: 'string', id: 3 },
              },
            },
          },
        },
      },
    },
  },
});
const RpcStatus = rpcTypes.lookupType('google.rpc.Status');
const ErrorInfo = rpcTypes.lookupType('google.rpc.ErrorInfo');

// errorReason returns the ErrorInfo reason of a gRPC error ("LEASE_LOST",
// "JOB_NOT_FOUND", ...) or "" when there is none.
function errorReason(err) {
  const raw = err && err.metadata ? err.metadata.get('grpc-status-details-bin') : [];
  if (!raw || raw.length === 0) return '';
  try {
    const st = RpcStatus.decode(raw[0]);
    for (const any of st.details) {
      if (any.type_url.endsWith('/google.rpc.ErrorInfo')) return ErrorInfo.decode(any.value).reason;
    }
  } catch {
    // Undecodable details: treat as no reason rather than failing the job.
  }
  return '';
}

function isLeaseLost(err) {
  return err && err.code === grpc.status.FAILED_PRECONDITION && errorReason(err) === 'LEASE_LOST';
}

function isTransient(err) {
  return err && (err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED);
}

function describe(err) {
  const reason = errorReason(err);
  const code = err && err.code !== undefined ? grpc.status[err.code] : undefined;
  return { error: err && err.details ? err.details : String(err), grpc_code: code, reason: reason || undefined };
}

function duration(ms) {
  return { seconds: Math.floor(ms / 1000), nanos: Math.round(ms % 1000) * 1e6 };
}

// W3C trace context: version-traceid-parentid-flags, lower-case hex.
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const TRACESTATE_MAX = 512;

// traceMetadata continues the producer's trace without an OpenTelemetry SDK:
// the producer's span context travels in the job's metadata ("traceparent",
// "tracestate", put there by the Go SDK and the CLI), and sending it as gRPC
// metadata on the calls made for the job makes the coordinator's spans of
// those calls (the report, and through it the commit) children of the
// producer's span. A worker with an SDK would start its own handler span
// instead and send that. Malformed values are not forwarded.
function traceMetadata(jobMetadata) {
  const md = new grpc.Metadata();
  const tp = jobMetadata && jobMetadata.traceparent;
  if (typeof tp === 'string' && TRACEPARENT.test(tp)) {
    md.set('traceparent', tp);
    const ts = jobMetadata.tracestate;
    if (typeof ts === 'string' && ts !== '' && ts.length <= TRACESTATE_MAX) md.set('tracestate', ts);
  }
  return md;
}

// unary calls client.method(request) with a deadline, and metadata md when
// given. onCall receives the call object so that a long-poll can be
// cancelled on shutdown.
function unary(client, method, request, timeoutMs, onCall, md) {
  return new Promise((resolve, reject) => {
    const call = client[method](request, md || new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err) reject(err);
      else resolve(res);
    });
    if (onCall) onCall(call);
  });
}

// sleep resolves after ms, or rejects with the signal's reason when it aborts.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });
}

function logger(base) {
  const write = (level, msg, attrs) => {
    process.stdout.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...base, ...attrs }) + '\n');
  };
  return {
    info: (msg, attrs) => write('info', msg, attrs),
    warn: (msg, attrs) => write('warn', msg, attrs),
    error: (msg, attrs) => write('error', msg, attrs),
    with: (attrs) => logger({ ...base, ...attrs }),
  };
}

// Why a handler's signal was aborted.
const STOP_LEASE_LOST = 'lease_lost';
const STOP_CANCEL_REQUESTED = 'cancel_requested';
const STOP_SHUTDOWN = 'shutdown';

// ---------------------------------------------------------------------------
// Heartbeat: renews one lease at a third of its duration.
// ---------------------------------------------------------------------------

class Heartbeat {
  constructor(client, token, leaseMs, onRevoke, log) {
    this.client = client;
    this.token = token;
    this.leaseMs = leaseMs;
    this.onRevoke = onRevoke;
    this.log = log;
    this.renewals = 0;
    this.paused = false;
    this.stopped = false;
    this.timer = null;
  }

  start() {
    this.schedule();
  }

  // The next renewal is scheduled only after the previous one answered, so
  // renewals never overlap however slow the coordinator is.
  schedule() {
    if (this.stopped) return;
    this.timer = setTimeout(() => this.beat(), Math.max(Math.floor(this.leaseMs / 3), 100));
  }

  async beat() {
    if (this.stopped) return;
    if (this.paused) {
      this.schedule();
      return;
    }
    try {
      const res = await unary(this.client, 'Renew', { tokens: [this.token], lease_duration: duration(this.leaseMs) }, CALL_TIMEOUT_MS);
      const status = res.results.length > 0 ? res.results[0].status : 'RENEW_STATUS_LOST';
      if (this.stopped) return;
      switch (status) {
        case 'RENEW_STATUS_RENEWED':
          this.renewals++;
          break;
        case 'RENEW_STATUS_CANCEL_REQUESTED':
          // The lease was extended, so the acknowledgement (Cancel) that
          // follows still holds a valid lease.
          this.renewals++;
          this.stop();
          this.onRevoke(STOP_CANCEL_REQUESTED);
          return;
        default:
          this.stop();
          this.onRevoke(STOP_LEASE_LOST);
          return;
      }
    } catch (err) {
      if (isLeaseLost(err)) {
        this.stop();
        this.onRevoke(STOP_LEASE_LOST);
        return;
      }
      // Anything else (coordinator restarting, network blip) is not proof the
      // lease is gone: keep trying; a late report is fenced anyway.
      this.log.warn('renew failed; will retry', describe(err));
    }
    this.schedule();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

// ---------------------------------------------------------------------------
// Worker: claim loops, one job at a time per slot.
// ---------------------------------------------------------------------------

class Worker {
  constructor(cfg, client, log) {
    this.cfg = cfg;
    this.client = client;
    this.log = log;
    this.handled = 0;
    this.stopping = false;
    this.stopController = new AbortController();
    // In-flight Claim calls, cancelled on stop so the process does not wait
    // out a long-poll.
    this.claims = new Set();
    // job id -> AbortController of the running handler.
    this.running = new Map();
  }

  async run() {
    this.log.info('worker started', {
      addr: this.cfg.addr,
      queues: this.cfg.queues,
      concurrency: this.cfg.concurrency,
      lease_ms: this.cfg.leaseMs,
      max_jobs: this.cfg.maxJobs || undefined,
    });
    const slots = [];
    for (let i = 0; i < this.cfg.concurrency; i++) slots.push(this.loop());
    await Promise.all(slots);
    this.log.info('worker stopped', { handled: this.handled });
  }

  // stop stops claiming. With abortRunning, running handlers are told to stop
  // and their jobs are released; otherwise they finish normally.
  stop(reason, { abortRunning }) {
    if (this.stopping) return;
    this.stopping = true;
    this.log.info('stopping', { reason });
    this.stopController.abort(STOP_SHUTDOWN);
    // A Claim cancelled at the very moment the coordinator leased a job
    // leaves that lease unanswered; it simply expires and the job is claimed
    // again. That is the price of not waiting out the long-poll.
    for (const call of this.claims) call.cancel();
    if (abortRunning) for (const ac of this.running.values()) ac.abort(STOP_SHUTDOWN);
  }

  async loop() {
    let failures = 0;
    while (!this.stopping) {
      let jobs;
      try {
        jobs = await this.claim();
        failures = 0;
      } catch (err) {
        if (this.stopping) break;
        failures++;
        const backoff = Math.min(CLAIM_BACKOFF_MAX_MS, CLAIM_BACKOFF_BASE_MS * 2 ** (failures - 1));
        const delay = backoff / 2 + Math.random() * (backoff / 2);
        this.log.warn('claim failed; backing off', { ...describe(err), backoff_ms: Math.round(delay) });
        await sleep(delay, this.stopController.signal).catch(() => {});
        continue;
      }
      for (const leased of jobs) {
        if (this.stopping) {
          // The claim raced with a stop: give the job back untouched.
          await this.publish(leased.token, 'Release', { token: leased.token }, this.log.with({ job_id: leased.job.id }));
          continue;
        }
        await this.process(leased);
      }
    }
  }

  claim() {
    let call;
    const p = unary(
      this.client,
      'Claim',
      {
        worker_id: this.cfg.workerId,
        queues: this.cfg.queues,
        max_jobs: 1,
        lease_duration: duration(this.cfg.leaseMs),
        wait: duration(this.cfg.waitMs),
      },
      this.cfg.waitMs + CLAIM_DEADLINE_MARGIN_MS,
      (c) => {
        call = c;
        this.claims.add(c);
      },
    );
    return p.then((res) => res.jobs).finally(() => this.claims.delete(call));
  }

  async process(leased) {
    const { job, token } = leased;
    const log = this.log.with({ job_id: job.id, generation: token.lease_generation, attempt: job.attempts });
    const md = traceMetadata(job.metadata);
    const ac = new AbortController();
    this.running.set(job.id, ac);
    const heartbeat = new Heartbeat(this.client, token, this.cfg.leaseMs, (why) => ac.abort(why), log);
    log.info('job claimed', { kind: job.kind, queue: job.queue });
    heartbeat.start();

    let result;
    let failure;
    try {
      result = await handle(job, {
        signal: ac.signal,
        log,
        renewals: () => heartbeat.renewals,
        pauseHeartbeats: () => {
          heartbeat.paused = true;
        },
      });
    } catch (err) {
      failure = err;
    } finally {
      heartbeat.stop();
      this.running.delete(job.id);
    }

    let outcome;
    if (ac.signal.aborted) {
      // Whatever the handler returned, the abort decides: the lease is gone,
      // or the job must end as cancelled or go back to the queue.
      outcome = await this.revoked(ac.signal.reason, token, log, md);
    } else if (failure === undefined) {
      const body = Buffer.from(JSON.stringify(result === undefined ? null : result));
      outcome = await this.publish(token, 'Complete', { token, result: body }, log, 'succeeded', md);
    } else {
      const f =
        failure instanceof JobFailure
          ? failure
          : new JobFailure('HANDLER_ERROR', failure && failure.message ? failure.message : String(failure), { retryable: true });
      const req = {
        token,
        error: { code: f.code, message: f.message, retryable: f.retryable },
        retry_after: f.retryAfterMs > 0 ? duration(f.retryAfterMs) : null,
      };
      log.warn('attempt failed', { code: f.code, message: f.message, retryable: f.retryable });
      outcome = await this.publish(token, 'Retry', req, log, (res) => res.job.state.replace('JOB_STATE_', '').toLowerCase(), md);
    }

    this.handled++;
    log.info('job done', { outcome, handled: this.handled });
    if (this.cfg.maxJobs && this.handled >= this.cfg.maxJobs) {
      this.stop(`handled LEASEHOLD_MAX_JOBS=${this.cfg.maxJobs} jobs`, { abortRunning: false });
    }
  }

  async revoked(why, token, log, md) {
    switch (why) {
      case STOP_LEASE_LOST:
        log.warn('lease lost; dropping job', { reason: 'LEASE_LOST' });
        return 'lease_lost';
      case STOP_CANCEL_REQUESTED:
        log.info('cancel requested; acknowledging');
        return this.publish(token, 'Cancel', { token, reason: 'cancel requested; acknowledged by the worker' }, log, 'cancelled', md);
      default:
        log.info('shutting down; releasing job');
        return this.publish(token, 'Release', { token }, log, 'released', md);
    }
  }

  // publish sends one report for a lease. It retries transient failures, and
  // turns LEASE_LOST into "drop the job" (returns "lease_lost"): another
  // generation owns it now and nothing more may be published for this one.
  // outcome names what a success means (a string, or a function of the
  // answer); md is the job's trace context (traceMetadata), if any.
  async publish(token, method, request, log, outcome = method.toLowerCase(), md = undefined) {
    for (let attempt = 1; ; attempt++) {
      try {
        const res = await unary(this.client, method, request, CALL_TIMEOUT_MS, undefined, md);
        return typeof outcome === 'function' ? outcome(res) : outcome;
      } catch (err) {
        if (isLeaseLost(err)) {
          log.warn('lease lost; dropping job', { reason: 'LEASE_LOST', call: method });
          return 'lease_lost';
        }
        if (!isTransient(err) || attempt >= PUBLISH_TRIES) {
          log.error(`${method} failed; the lease will expire and the job will be retried`, describe(err));
          return 'report_failed';
        }
        await sleep(CLAIM_BACKOFF_BASE_MS * 2 ** (attempt - 1));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------

async function main() {
  let cfg;
  try {
    cfg = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`leasehold node worker: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = logger({ worker_id: cfg.workerId });
  const WorkerService = loadWorkerService(cfg.protoDir);
  let ch;
  try {
    ch = channel(cfg);
  } catch (err) {
    process.stderr.write(`leasehold node worker: ${err.message}\n`);
    process.exit(2);
  }
  const client = new WorkerService(cfg.addr, ch.creds, ch.options);
  const worker = new Worker(cfg, client, log);

  let signals = 0;
  const onSignal = (sig) => {
    signals++;
    if (signals > 1) {
      log.warn('second signal; exiting without releasing', { signal: sig });
      process.exit(1);
    }
    worker.stop(`received ${sig}`, { abortRunning: true });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  await worker.run();
  client.close();
  process.removeListener('SIGTERM', onSignal);
  process.removeListener('SIGINT', onSignal);
}

main().catch((err) => {
  process.stderr.write(`leasehold node worker: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});

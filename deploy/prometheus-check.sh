#!/usr/bin/env bash
# A real Prometheus scrapes a real `leasehold serve`, and the queue-depth
# metric must show up in Prometheus' own query API:
#
#   1. install Debian's prometheus package when `prometheus` is missing
#      (without letting its service start); promtool checks and unit-tests
#      deploy/prometheus/leasehold-rules.yaml;
#   2. build leasehold and start `leasehold serve` on the embedded SQLite
#      file, gRPC and HTTP on free loopback ports;
#   3. start Prometheus on a free loopback port, scraping /metrics every
#      second;
#   4. create a job with the CLI;
#   5. query Prometheus until leasehold_queue_jobs{queue="prometheus-check",
#      state="queued"} is 1, and then the recording rule of
#      deploy/prometheus/leasehold-rules.yaml over it (loaded as rule_files),
#      or fail after PROMETHEUS_CHECK_TIMEOUT seconds (default 90).
#
# Everything listens on 127.0.0.1 only, and both processes are stopped (by
# their process ids) and the temporary directory removed on every exit.
#
#   deploy/prometheus-check.sh          (make prometheus-check; CI runs it)
#
# LEASEHOLD_BIN uses an already built binary instead of `go build`.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
timeout_s="${PROMETHEUS_CHECK_TIMEOUT:-90}"
queue="prometheus-check"

say() { printf 'prometheus-check: %s\n' "$*" >&2; }
fail() {
  say "FAIL: $*"
  for f in "${tmp:-/nonexistent}"/serve.log "${tmp:-/nonexistent}"/prometheus.log; do
    [ -f "$f" ] && { say "--- $(basename "$f") (last 30 lines)"; tail -n 30 "$f" >&2; }
  done
  exit 1
}

# 1. Prometheus, from Debian.
if ! command -v prometheus >/dev/null 2>&1; then
  say "installing Debian's prometheus package"
  # A policy-rc.d that refuses keeps the package from starting its own
  # service (on 9090, with its own config) on this machine.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=1
  fi
  sudo_=""
  [ "$(id -u)" -ne 0 ] && sudo_="sudo"
  $sudo_ apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  [ "$own_policy" -eq 1 ] && rm -f "$policy"
fi
command -v curl >/dev/null 2>&1 || fail "curl is needed to query Prometheus (apt-get install curl)"
say "$(prometheus --version 2>&1 | head -n 1)"

# The shipped rules: valid, and each alert fires on its test series.
command -v promtool >/dev/null 2>&1 || fail "promtool is missing (Debian's prometheus package has it)"
promtool check rules "$root/deploy/prometheus/leasehold-rules.yaml" >&2 || fail "promtool check rules"
(cd "$root/deploy/prometheus" && promtool test rules leasehold-rules_test.yaml) >&2 || fail "promtool test rules"
# The time bound starts once the tools are there (an install's duration is
# the mirror's, not ours).
deadline=$((SECONDS + timeout_s))

tmp="$(mktemp -d)"
serve_pid=""
prom_pid=""
cleanup() {
  for pid in $prom_pid $serve_pid; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $prom_pid $serve_pid; do
    # Bounded: a process that ignores SIGTERM for 10s is killed.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# free_port prints a loopback port nothing listens on.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  fail "no free loopback port"
}

# wait_log FILE PATTERN PID: wait until FILE has a line matching PATTERN
# while process PID runs.
wait_log() {
  until grep -q "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || fail "the process writing $(basename "$1") exited"
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for \"$2\" in $(basename "$1")"
    sleep 0.2
  done
}

# 2. leasehold serve.
bin="${LEASEHOLD_BIN:-}"
if [ -z "$bin" ]; then
  say "building leasehold"
  (cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
  bin="$tmp/leasehold"
fi
"$bin" serve --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --sqlite-path "$tmp/leasehold.db" \
  >"$tmp/serve.log" 2>&1 &
serve_pid=$!
wait_log "$tmp/serve.log" 'leasehold coordinator serving' "$serve_pid"
grpc_addr="$(sed -n 's/.*msg="leasehold coordinator serving" listen=\([^ ]*\).*/\1/p' "$tmp/serve.log" | head -n 1)"
http_addr="$(sed -n 's/.*msg="leasehold http serving[^"]*" http_listen=\([^ ]*\).*/\1/p' "$tmp/serve.log" | head -n 1)"
[ -n "$grpc_addr" ] && [ -n "$http_addr" ] || fail "cannot read the addresses from serve's log"
say "leasehold serve: gRPC $grpc_addr, HTTP $http_addr"

# 3. Prometheus.
prom_addr="127.0.0.1:$(free_port)"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $root/deploy/prometheus/leasehold-rules.yaml
scrape_configs:
  - job_name: leasehold
    static_configs:
      - targets: ["$http_addr"]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="$prom_addr" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
until curl -fsS "http://$prom_addr/-/ready" >/dev/null 2>&1; do
  kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited"
  [ "$SECONDS" -lt "$deadline" ] || fail "prometheus not ready on $prom_addr"
  sleep 0.5
done
say "prometheus ready on $prom_addr"

# 4. A job.
"$bin" --addr "$grpc_addr" job create --queue "$queue" --kind check --payload '{}' >/dev/null

# 5. Ask Prometheus: the scraped gauge, then the shipped recording rule
# over it (so the rules use the names the coordinator really exports).
for query in "leasehold_queue_jobs{queue=\"$queue\",state=\"queued\"}" \
  "leasehold:queue_jobs:max{queue=\"$queue\",state=\"queued\"}"; do
  while :; do
    body="$(curl -fsS --get "http://$prom_addr/api/v1/query" --data-urlencode "query=$query" || true)"
    # The value of an instant vector sample: ..."value":[<time>,"1"]...
    if printf '%s' "$body" | grep -q '"value":\[[0-9.]*,"1"\]'; then
      say "OK: Prometheus has $query = 1"
      break
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail "Prometheus never had $query = 1; last answer: $body"
    sleep 1
  done
done

#!/usr/bin/env bash
# Builds the Leasehold container image from the repository's Dockerfile on
# this machine, and runs it once. It says what it did at every step and
# exits non-zero on any problem.
#
#   deploy/image.sh                 build (prebuilt root filesystem) and run
#   deploy/image.sh --from-source   build through the Dockerfile's own build stage
#
# Why two ways: the Dockerfile's build stage starts FROM golang, which needs a
# registry. Where none can be reached (this project's machines), the default
# way builds the root filesystem with the local Go through the same
# deploy/rootfs.sh the build stage runs, and hands it to the Dockerfile as the
# named build context "build" (buildah/podman --build-context), which
# replaces that stage: the final stage, the one users get, is built from the
# Dockerfile as it is. --from-source runs the whole Dockerfile instead, on a
# stand-in for golang:1.26-bookworm made here from Debian bookworm
# (debootstrap) plus the local Go toolchain.
#
# Then it runs the image (podman, host network, loopback addresses only;
# gRPC on a free port, HTTP on port 0, so that nothing depends on 7400 or
# 7401 being free):
#   1. `leasehold version`;
#   2. `leasehold serve` on the embedded SQLite default, as uid 65532 with
#      every capability dropped, until grpc.health.v1 says SERVING, then
#      SIGTERM and a clean exit 0;
#   3. like the Kubernetes pod: `leasehold migrate`, then `serve --no-migrate`
#      against PostgreSQL with a read-only root filesystem, a tmpfs /tmp and
#      the URL in LEASEHOLD_DATABASE_URL, until SERVING, then SIGTERM.
#
# Environment:
#   LEASEHOLD_IMAGE                 tag to build (default localhost/leasehold:dev)
#   LEASEHOLD_IMAGE_REQUIRE=1       fail when no container builder is installed
#                                   (default: verify the static binary only, and say so)
#   LEASEHOLD_IMAGE_DATABASE_URL    PostgreSQL for step 3 (default
#                                   $LEASEHOLD_TEST_DATABASE_URL, else the local test database);
#                                   the script works in a schema of its own and drops it
#   LEASEHOLD_IMAGE_SKIP_POSTGRES=1 leave out step 3 (it is reported as skipped)
#   LEASEHOLD_IMAGE_STRICT=1        fail, instead of printing a NOTE, when `serve`
#                                   lacks a flag the chart passes or does not serve
#                                   the "liveness"/"readiness" health services
#                                   (turn it on once those land in the coordinator)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

mode=prebuilt
case "${1:-}" in
  "") ;;
  --from-source) mode=from-source ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: deploy/image.sh [--from-source]" >&2; exit 2 ;;
esac

image="${LEASEHOLD_IMAGE:-localhost/leasehold:dev}"
say() { echo "== image: $*"; }
fail() { echo "FAIL: image: $*" >&2; exit 1; }
# note: what the chart needs from the coordinator and this build lacks.
notes=0
note() {
  if [ "${LEASEHOLD_IMAGE_STRICT:-0}" = 1 ]; then fail "$* (LEASEHOLD_IMAGE_STRICT=1)"; fi
  say "NOTE: $*"
  notes=$((notes + 1))
}
elapsed() { local s=$(( $(date +%s) - $1 )); echo "$((s / 60))m$((s % 60))s"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-image.XXXXXX")"
containers=()
pg_schema=""
cleanup() {
  local c
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  if [ -n "$pg_schema" ]; then
    psql "$pg_admin_url" -qtAc "DROP SCHEMA IF EXISTS $pg_schema CASCADE" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Which builder? buildah first, podman (which embeds buildah) second.
builder=""
if command -v buildah >/dev/null 2>&1; then builder=buildah
elif command -v podman >/dev/null 2>&1; then builder=podman
fi

# --- The static binary and the root filesystem ----------------------------
verify_static() {
  local bin="$1" f l
  f="$(file -b "$bin" 2>/dev/null || true)"
  l="$(ldd "$bin" 2>&1 || true)"
  say "file: ${f:-<file not installed>}"
  say "ldd: $l"
  say "go version -m: $(go version -m "$bin" | grep -E 'CGO_ENABLED|-trimpath|-ldflags' | tr -s '\t ' ' ' | paste -sd';' -)"
  go version -m "$bin" | grep -q 'CGO_ENABLED=0' || fail "$bin was not built with CGO_ENABLED=0"
  go version -m "$bin" | grep -q -- '-trimpath=true' || fail "$bin was not built with -trimpath"
  case "$l" in *"not a dynamic executable"*|*"statically linked"*) ;; *) fail "ldd does not call $bin static: $l" ;; esac
  if [ -n "$f" ]; then
    case "$f" in *"statically linked"*) ;; *) fail "file does not call $bin statically linked: $f" ;; esac
  fi
  say "the binary is static"
}

if [ "$mode" = prebuilt ] || [ -z "$builder" ]; then
  t0=$(date +%s)
  say "building the root filesystem with the local $(go version | cut -d' ' -f3-): deploy/rootfs.sh"
  deploy/rootfs.sh "$work/rootfs"
  say "built $(du -h "$work/rootfs/leasehold" | cut -f1) binary in $(elapsed "$t0")"
  verify_static "$work/rootfs/leasehold"
fi

if [ -z "$builder" ]; then
  msg="no container builder (buildah or podman) is installed: verified the static binary only, built and ran no image"
  if [ "${LEASEHOLD_IMAGE_REQUIRE:-0}" = 1 ]; then fail "$msg (LEASEHOLD_IMAGE_REQUIRE=1)"; fi
  say "$msg"
  exit 0
fi

[ "$(id -u)" = 0 ] || fail "run as root: the image's /data must be owned by uid 65532 (chown), and rootful podman runs the checks"

# --- Container runtime settings of this machine ---------------------------
# crun (podman's default runtime on Debian 12) refuses a hybrid cgroup v1/v2
# hierarchy ("cgroups in hybrid mode not supported"); runc accepts it.
runtime_opts=()
if [ -d /sys/fs/cgroup/unified ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  command -v runc >/dev/null 2>&1 || fail "this machine has hybrid cgroups, which crun refuses: install runc (apt-get install runc)"
  runtime_opts=(--runtime runc)
  say "hybrid cgroup v1/v2 hierarchy: using the runc runtime"
fi
# podman asks for nofile and nproc limits of 1048576 by default; raising a
# limit above its hard value needs CAP_SYS_RESOURCE, which this sandbox
# lacks. Ask for what the shell has (nproc: 4096 is plenty for one Go
# process, and stays under every hard limit seen here).
ulimit_opts=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)

command -v podman >/dev/null 2>&1 || fail "podman is needed to run the image (apt-get install podman)"

# --- Build -----------------------------------------------------------------
goarch="$(go env GOARCH)"
build_opts=(--build-arg TARGETOS=linux --build-arg "TARGETARCH=$goarch" -f Dockerfile -t "$image")
# The image this tag named before, removed below once the tag moves on,
# so that repeated runs do not pile up untagged images.
previous="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
t0=$(date +%s)
if [ "$mode" = prebuilt ]; then
  version="$("$work/rootfs/leasehold" version | awk '{print $2}')"
  say "$($builder --version): building $image from the Dockerfile, its \"build\" stage replaced by the root filesystem above (--build-context build=$work)"
  "$builder" build "${build_opts[@]}" --build-arg "VERSION=$version" --build-context "build=$work" .
else
  # The stand-in for golang:1.26-bookworm: Debian bookworm and this Go.
  gover="$(go env GOVERSION)"
  standin="localhost/leasehold-golang-standin:${gover#go}-bookworm"
  if ! buildah inspect --type image "$standin" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null 2>&1 || fail "--from-source needs debootstrap (apt-get install debootstrap) to make a stand-in Go image"
    say "making $standin: debootstrap bookworm (minbase, ca-certificates) + $(go env GOROOT)"
    debootstrap --variant=minbase --include=ca-certificates bookworm "$work/standin" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
    ctr="$(buildah from scratch)"
    buildah copy --quiet "$ctr" "$work/standin" / >/dev/null
    buildah copy --quiet "$ctr" "$(go env GOROOT)" /usr/local/go >/dev/null
    # This machine reaches the Go module proxy through whatever its own
    # trust store says (here, an egress proxy's CA beside Debian's), so the
    # stand-in trusts the same. The image itself does not: rootfs.sh
    # takes only Debian's Mozilla set.
    buildah copy --quiet "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
    buildah config --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env GOPATH=/go --env GOTOOLCHAIN=local --workingdir /go --cmd bash "$ctr"
    buildah commit --quiet "$ctr" "$standin" >/dev/null
    buildah rm "$ctr" >/dev/null
    rm -rf "$work/standin"
    say "made $standin in $(elapsed "$t0")"
  else
    say "using the stand-in Go image $standin made by an earlier run"
  fi
  say "$($builder --version): building $image from the whole Dockerfile, GO_IMAGE=$standin (module downloads over the host network)"
  "$builder" build "${build_opts[@]}" "${runtime_opts[@]}" "${ulimit_opts[@]}" --network host \
    --build-arg "GO_IMAGE=$standin" .
fi
say "built $image in $(elapsed "$t0")"
current="$(podman image inspect --format '{{.Id}}' "$image")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 && say "removed the previous $image (${previous:0:12})" || true
fi

# --- Inspect -----------------------------------------------------------------
cfg="$(podman image inspect "$image" --format '{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{.Config.WorkingDir}}|{{.Size}}')"
IFS='|' read -r user entrypoint cmd workdir size <<<"$cfg"
say "config: user=$user entrypoint=$entrypoint cmd=$cmd workdir=$workdir size=$((size / 1024 / 1024))MiB"
[ "$user" = "65532:65532" ] || fail "image user is $user, want 65532:65532"
[ "$entrypoint" = '["/leasehold"]' ] || fail "entrypoint is $entrypoint, want [\"/leasehold\"]"
[ "$cmd" = '["serve"]' ] || fail "cmd is $cmd, want [\"serve\"]"
# Nothing but the root filesystem of deploy/rootfs.sh.
ctr="$(buildah from "$image")"
mnt="$(buildah mount "$ctr")"
listing="$(cd "$mnt" && find . -mindepth 1 -printf '%M %u:%g %p\n' | sort -k3)"
# The image trusts Debian's CA set only, never a CA this machine added.
local_cas=0
for ca in /usr/local/share/ca-certificates/*.crt; do
  [ -f "$ca" ] || continue
  local_cas=$((local_cas + 1))
  key="$(sed -n '2p' "$ca")"
  if grep -qF -- "$key" "$mnt/etc/ssl/certs/ca-certificates.crt"; then
    buildah umount "$ctr" >/dev/null; buildah rm "$ctr" >/dev/null
    fail "the image's CA bundle contains this machine's local CA $ca"
  fi
done
say "CA bundle: $(grep -c 'BEGIN CERTIFICATE' "$mnt/etc/ssl/certs/ca-certificates.crt") certificates, none of this machine's $local_cas local ones"
buildah umount "$ctr" >/dev/null; buildah rm "$ctr" >/dev/null
echo "$listing" | sed 's/^/     /'
grep -q ' 65532:65532 ./data$' <<<"$listing" || fail "/data is not owned by 65532:65532"
grep -q '^drwxrwxrwt .* ./tmp$' <<<"$listing" || fail "/tmp is not 1777"

# --- Run ---------------------------------------------------------------------
make -s "$root/.bin/grpcurl" >/dev/null
grpcurl="$root/.bin/grpcurl"

free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  fail "no free loopback port found"
}

# health ADDR SERVICE: the status grpc.health.v1 reports, or the error.
health() {
  local out
  if out="$("$grpcurl" -plaintext -max-time 2 -d "{\"service\":\"$2\"}" "$1" grpc.health.v1.Health/Check 2>&1)"; then
    sed -n 's/.*"status": "\([A-Z_]*\)".*/\1/p' <<<"$out"
  else
    echo "ERROR: $(tr '\n' ' ' <<<"$out")"
  fi
}

run_opts=("${runtime_opts[@]}" "${ulimit_opts[@]}" --network host --cap-drop ALL --security-opt no-new-privileges)

# serve_check NAME ADDR [podman run options and args...]: starts the image,
# waits for SERVING, reports the health services, stops it with SIGTERM and
# wants exit code 0.
serve_check() {
  local name="$1" addr="$2"; shift 2
  local c="leasehold-image-check-$$-$name" st="" t0
  containers+=("$c")
  t0=$(date +%s)
  podman run -d --name "$c" "${run_opts[@]}" "$@" >/dev/null
  for _ in $(seq 1 60); do
    st="$(health "$addr" "")"
    [ "$st" = SERVING ] && break
    [ "$(podman inspect "$c" --format '{{.State.Running}}')" = true ] || break
    sleep 0.5
  done
  if [ "$st" != SERVING ]; then
    podman logs "$c" >&2 || true
    fail "$name: grpc.health.v1 on $addr never said SERVING (last: ${st:-nothing})"
  fi
  say "$name: health SERVING on $addr after $(elapsed "$t0")"
  # The Kubernetes probes ask for these two service names.
  local svc s
  for svc in liveness readiness; do
    s="$(health "$addr" "$svc")"
    case "$s" in
      SERVING) say "$name: health service \"$svc\": SERVING" ;;
      *NotFound*|*NOT_FOUND*|*"unknown service"*)
        note "$name: health service \"$svc\" is not served by this build (the chart's probes ask for it)" ;;
      *) fail "$name: health service \"$svc\": $s" ;;
    esac
  done
  podman stop -t 60 "$c" >/dev/null
  local code
  code="$(podman inspect "$c" --format '{{.State.ExitCode}}')"
  podman logs "$c" 2>&1 | tail -n 3 | sed "s/^/     $name log: /"
  [ "$code" = 0 ] || { podman logs "$c" >&2; fail "$name: exit code $code after SIGTERM, want 0"; }
  say "$name: stopped by SIGTERM, exit code 0"
  podman rm "$c" >/dev/null
}

# 1. version
out="$(podman run --rm "${run_opts[@]}" "$image" version)"
say "podman run $image version: $out"
[[ "$out" == "leasehold "* ]] || fail "unexpected version output: $out"

# Every flag the chart can pass to serve (templates/deployment.yaml).
help="$(podman run --rm "${run_opts[@]}" "$image" serve -h 2>&1 || true)"
missing=()
for flag in $(grep -oE -- '- --[a-z][a-z-]*' deploy/helm/leasehold/templates/deployment.yaml | sed 's/^- --//' | sort -u); do
  # cobra's help: "  -x, --flag type   text" or "      --flag type   text".
  grep -qE "^ +(-[a-z], )?--$flag( |\$)" <<<"$help" || missing+=("--$flag")
done
if [ "${#missing[@]}" -gt 0 ]; then
  note "serve does not accept ${missing[*]}, which the chart passes: its pods would exit with a usage error on this build"
else
  say "serve accepts every flag the chart passes"
fi
# The same for the bootstrap Job's `key create` (templates/bootstrap-job.yaml).
help="$(podman run --rm "${run_opts[@]}" "$image" key create -h 2>&1 || true)"
missing=()
for flag in $(grep -oE -- '- --[a-z][a-z-]*' deploy/helm/leasehold/templates/bootstrap-job.yaml | sed 's/^- --//' | sort -u); do
  grep -qE "^ +(-[a-z], )?--$flag( |\$)" <<<"$help" || missing+=("--$flag")
done
if [ "${#missing[@]}" -gt 0 ]; then
  note "key create does not accept ${missing[*]}, which the chart's bootstrap Job passes"
else
  say "key create accepts every flag the bootstrap Job passes"
fi

# 2. serve on the embedded SQLite default (./leasehold.db in /data).
port="$(free_port)"
serve_check sqlite "127.0.0.1:$port" "$image" serve --listen "127.0.0.1:$port" --http-listen 127.0.0.1:0

# 3. as in the pod: migrate, then serve --no-migrate on a read-only root.
if [ "${LEASEHOLD_IMAGE_SKIP_POSTGRES:-0}" = 1 ]; then
  say "SKIPPED the PostgreSQL run (LEASEHOLD_IMAGE_SKIP_POSTGRES=1)"
else
  pg_admin_url="${LEASEHOLD_IMAGE_DATABASE_URL:-${LEASEHOLD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}}"
  command -v psql >/dev/null 2>&1 || fail "psql is needed for the PostgreSQL run (or set LEASEHOLD_IMAGE_SKIP_POSTGRES=1)"
  psql "$pg_admin_url" -qtAc 'select 1' >/dev/null 2>&1 \
    || fail "PostgreSQL does not answer at $pg_admin_url (set LEASEHOLD_IMAGE_DATABASE_URL, or LEASEHOLD_IMAGE_SKIP_POSTGRES=1 to leave this run out)"
  pg_schema="lh_image_$$_$RANDOM"
  psql "$pg_admin_url" -qtAc "CREATE SCHEMA $pg_schema" >/dev/null
  case "$pg_admin_url" in *\?*) db_url="$pg_admin_url&search_path=$pg_schema" ;; *) db_url="$pg_admin_url?search_path=$pg_schema" ;; esac
  pod_opts=(--read-only --tmpfs /tmp:rw,size=64m,mode=1777 --user 65532:65532 -e "LEASEHOLD_DATABASE_URL=$db_url")
  out="$(podman run --rm "${run_opts[@]}" "${pod_opts[@]}" "$image" migrate 2>&1)" \
    || { echo "$out" >&2; fail "postgres: leasehold migrate failed"; }
  say "postgres: leasehold migrate into schema $pg_schema: ok"
  port="$(free_port)"
  serve_check postgres "127.0.0.1:$port" "${pod_opts[@]}" "$image" serve --listen "127.0.0.1:$port" --http-listen 127.0.0.1:0 --no-migrate
fi

say "OK: $image ($mode) built, static, nonroot, ran version and serve"
if [ "$notes" -gt 0 ]; then
  say "$notes NOTE(s) above: this build of the coordinator lacks what the chart asks of it"
fi

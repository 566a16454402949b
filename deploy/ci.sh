#!/usr/bin/env bash
# CI checks of the deployment files (make deploy-check):
#   1. the pinned helm in ./.bin (make helm), its version checked;
#   2. helm lint --strict of the chart, with default values and with each
#      values file of its ci/ folder (full-values.yaml: everything on);
#   3. the strict decoding test in deploy/ (its own Go module): every
#      rendered object decodes strictly into its k8s.io/api type, the
#      chart's invariants hold, deploy/kubernetes equals the default render;
#   4. deploy/image.sh: builds the image with buildah and runs it with
#      podman (installed from Debian's packages when missing), PostgreSQL
#      included (it must answer, as .ci/run makes sure), strictly: serve
#      must accept every flag the chart passes and serve the
#      "liveness"/"readiness" health services (LEASEHOLD_IMAGE_STRICT=1).
# Any problem fails the script; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

export KUBE_VERSION="${KUBE_VERSION:-1.37.0}"
helm_version="$(sed -n 's/^HELM_VERSION *?= *//p' Makefile)"
[ -n "$helm_version" ] || { echo "FAIL: no HELM_VERSION in the Makefile" >&2; exit 1; }
step() { echo "== deploy: $*"; }
elapsed() { local s=$(( $(date +%s) - $1 )); echo "$((s / 60))m$((s % 60))s"; }

# 1. helm.
t0=$(date +%s)
if [ -x .bin/helm ] && ! .bin/helm version --short 2>/dev/null | grep -q "^$helm_version"; then
  step "replacing .bin/helm ($(.bin/helm version --short 2>&1)) with $helm_version"
  rm -f .bin/helm
fi
step "make helm: helm $helm_version in .bin/ (go install; minutes on a cold build cache)"
make -s helm
export HELM="$PWD/.bin/helm"
got="$("$HELM" version --short)"
case "$got" in "$helm_version"*) ;; *) echo "FAIL: .bin/helm is $got, want $helm_version" >&2; exit 1 ;; esac
step "helm $got ready in $(elapsed "$t0")"

# 2. helm lint.
for values in "" deploy/helm/leasehold/ci/*.yaml; do
  step "helm lint --strict --kube-version $KUBE_VERSION deploy/helm/leasehold${values:+ -f $values}"
  "$HELM" lint --strict --kube-version "$KUBE_VERSION" deploy/helm/leasehold ${values:+-f "$values"}
done

# 3. The strict decoding test.
t0=$(date +%s)
step "go vet and go test in deploy/ (module $(cd deploy && go list -m))"
(cd deploy && go vet ./... && go test -count=1 -v ./...)
step "strict decoding test passed in $(elapsed "$t0")"

# 4. The image.
missing=()
for tool in buildah podman runc; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  step "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
t0=$(date +%s)
LEASEHOLD_IMAGE_REQUIRE=1 LEASEHOLD_IMAGE_STRICT=1 deploy/image.sh
step "image built and run in $(elapsed "$t0")"

step "OK: helm lint, strict decoding test, image"

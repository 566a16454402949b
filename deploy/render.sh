#!/usr/bin/env bash
# Renders the Leasehold chart the one way this repository renders it: the
# release "leasehold" in namespace "leasehold", for Kubernetes
# $KUBE_VERSION. Extra arguments go to `helm template` (e.g. -f values.yaml).
#
#   deploy/render.sh --skip-tests > deploy/kubernetes/leasehold.yaml   (what `make manifests` runs)
#
# `make manifests` and the strict decoding test in deploy/ both call this,
# so the committed manifests and the test's default render cannot drift.
# helm: $HELM, else ./.bin/helm (make helm), else helm on PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
helm="${HELM:-}"
if [ -z "$helm" ]; then
  if [ -x "$root/.bin/helm" ]; then helm="$root/.bin/helm"
  elif command -v helm >/dev/null 2>&1; then helm="$(command -v helm)"
  else echo "render.sh: no helm: run 'make helm' (installs it into .bin/) or set HELM" >&2; exit 1
  fi
fi
exec "$helm" template leasehold "$root/deploy/helm/leasehold" \
  --namespace leasehold --kube-version "${KUBE_VERSION:-1.37.0}" "$@"

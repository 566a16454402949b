#!/bin/sh
# Lays out the container image's whole filesystem under OUT: the static
# leasehold binary and what distroless/static would give it, no more. The
# Dockerfile's build stage runs this, and so does deploy/image.sh on a
# machine without registry access, so the image is the same either way.
#
#   deploy/rootfs.sh OUT        (from the repository root, as root for the chown)
#
# GOOS/GOARCH choose the target, as for go build.
set -eu
out="${1:?usage: deploy/rootfs.sh OUT}"
mkdir -p "$out/etc/ssl/certs" "$out/tmp" "$out/data"

# CGO_ENABLED=0: the SQLite engine (modernc.org/sqlite) is pure Go, so the
# binary is static and needs no libc. -trimpath and an empty build id keep
# the builder's paths and build ids out of it. VERSION (set by make, or
# by hand: the image's build context has no .git) is stamped as the
# version the binary reports; without it the binary reports its default.
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -buildid= ${VERSION:+-X main.Version=$VERSION}" -o "$out/leasehold" ./cmd/leasehold
if ! go version -m "$out/leasehold" | grep -q 'CGO_ENABLED=0'; then
  echo "rootfs.sh: $out/leasehold was not built with CGO_ENABLED=0" >&2
  exit 1
fi

# CA certificates, for PostgreSQL sslmode=verify-full and OTLP over https:
# the Mozilla set of Debian's ca-certificates package, and nothing this
# machine added locally (/usr/local/share/ca-certificates, e.g. a proxy's).
set -- /usr/share/ca-certificates/mozilla/*.crt
[ -f "$1" ] || { echo "rootfs.sh: no /usr/share/ca-certificates/mozilla/*.crt: install ca-certificates" >&2; exit 1; }
cat "$@" > "$out/etc/ssl/certs/ca-certificates.crt"
# The distroless "nonroot" user and group, 65532, with /data as home.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"
# A sticky, world-writable /tmp, and /data owned by nonroot: the working
# directory, where `serve` without --database-url keeps ./leasehold.db.
chmod 1777 "$out/tmp"
if [ "$(id -u)" = 0 ]; then
  chown 65532:65532 "$out/data"
else
  echo "rootfs.sh: WARNING: not root, so $out/data is not owned by 65532: fine for checking the binary, not for an image" >&2
fi

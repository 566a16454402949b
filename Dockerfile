# Leasehold container image: one static binary on an empty (scratch) base,
# running as the distroless "nonroot" user (uid/gid 65532).
#
#   docker build -t leasehold .
#   docker run --rm leasehold version
#   docker run --rm -p 7400:7400 -v leasehold-data:/data leasehold \
#     serve --listen 0.0.0.0:7400
#
# Stage "build" compiles the binary and lays out the final filesystem under
# /rootfs; the final stage only copies /rootfs. That split is deliberate:
# the final stage pulls nothing, and a builder with no registry access can
# supply /rootfs itself by overriding the "build" stage with a named build
# context (deploy/image.sh does exactly that with buildah:
# --build-context build=<dir holding rootfs/>).

ARG GO_IMAGE=golang:1.26-bookworm

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS
ARG TARGETARCH
# The version the binary reports (deploy/rootfs.sh stamps it when set):
# docker build --build-arg VERSION=$(git describe --tags) .
ARG VERSION=""
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# deploy/rootfs.sh builds the static binary (CGO_ENABLED=0, -trimpath) and
# lays out the final filesystem; deploy/image.sh runs the same script on a
# machine without registry access.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH sh deploy/rootfs.sh /rootfs

FROM scratch
ARG VERSION=""
LABEL org.opencontainers.image.title="leasehold" \
      org.opencontainers.image.description="Leasehold: durable jobs over gRPC (coordinator and operator CLI)" \
      org.opencontainers.image.source="https://github.com/leasehold/leasehold" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /data
# 7400: gRPC (workers, producers, operators, grpc.health.v1).
# 7401: HTTP (/metrics), with `serve --http-listen`.
EXPOSE 7400 7401
ENTRYPOINT ["/leasehold"]
CMD ["serve"]

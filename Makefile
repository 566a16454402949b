# Leasehold build. Tools are pinned and installed into ./.bin with go install,
# so a fresh machine needs only Go (and PostgreSQL for the tests).

BUF_VERSION                ?= v1.75.0
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2
GRPCURL_VERSION            ?= v1.9.4
HELM_VERSION               ?= v3.22.0
GOLANGCI_LINT_VERSION      ?= v2.15.0
# The Kubernetes version helm lints and renders the chart for (helm's k8s.io
# modules are v0.37); passed explicitly so the result never depends on how
# helm was built. deploy/render.sh and deploy/ci.sh read it from the
# environment, with the same default.
KUBE_VERSION               ?= 1.37.0
export KUBE_VERSION

BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

# The PostgreSQL test database. Tests that need PostgreSQL fail (never skip)
# when it cannot be reached.
LEASEHOLD_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
export LEASEHOLD_TEST_DATABASE_URL

GO_TEST_FLAGS ?= -race -count=1 -timeout 20m

# The version the binary reports (leasehold version, GetVersion): the
# nearest v* tag as git describe says it (v0.2.0, or v0.2.0-3-gabc1234
# three commits later, -dirty with local changes). Without a tag or git,
# nothing is stamped and the binary reports cmd/leasehold's VersionDefault.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X main.Version=$(VERSION))
export VERSION

# The side-by-side benchmark (make bench-compare): the PostgreSQL server
# each run makes its fresh schema on, and how many rounds of which modes.
LEASEHOLD_BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
export LEASEHOLD_BENCH_DATABASE_URL
ROUNDS ?= 3
MODES  ?= drain combined latency
# Extra flags for every run, e.g. BENCH_FLAGS="--jobs 5000 --duration 5s".
BENCH_FLAGS ?=
# How much make fuzz runs each fuzz target: a count of inputs, since a
# duration races the fuzzer's own deadline on go1.26 and fails with
# "context deadline exceeded" at the end (go.dev/issue/75804).
FUZZTIME ?= 20000x

.PHONY: all tools grpcurl generate console-assets lint breaking build release test test-long ensure-test-db run bench bench-compare fuzz clean helm manifests image deploy-check prometheus-check

all: lint build test

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/grpcurl:
	GOBIN=$(BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
$(BIN)/golangci-lint:
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# helm's release build stamps its version and default Kubernetes version
# with -X; go install does not, so do it here (`helm version` then says
# $(HELM_VERSION), which deploy/ci.sh checks).
$(BIN)/helm:
	GOBIN=$(BIN) go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" \
	  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/grpcurl $(BIN)/golangci-lint

## grpcurl: install only grpcurl into ./.bin (for the README's grpcurl lines).
grpcurl: $(BIN)/grpcurl
	@echo 'grpcurl is in ./.bin; put it on your PATH with:'
	@echo '  export PATH="$$PWD/.bin:$$PATH"'

## generate: regenerate gen/ from proto/ with the pinned buf and plugins.
generate: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	buf generate

## console-assets: refresh the web console's one vendored library (htmx)
## from npm at the version console/assets/package-lock.json pins, into
## console/static (embedded in the binary; nothing is fetched at run time).
console-assets:
	cd console/assets && npm ci --no-audit --no-fund
	cp console/assets/node_modules/htmx.org/dist/htmx.min.js console/static/htmx.min.js
	cp console/assets/node_modules/htmx.org/LICENSE console/static/htmx.LICENSE

## lint: buf lint, then golangci-lint with .golangci.yaml: the gofmt check
## (fmt --diff) and the linters (go vet's checks among them); gen/ is
## excluded.
lint: $(BIN)/buf $(BIN)/golangci-lint
	buf lint
	golangci-lint fmt --diff ./...
	golangci-lint run ./...

## breaking: buf breaking against the previous commit (.ci/run runs it):
## the API may grow, never break.
breaking: $(BIN)/buf
	buf breaking --against '.git#ref=HEAD~1'

## build: build the leasehold binary into ./.bin.
build:
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/leasehold ./cmd/leasehold
	@echo 'built ./.bin/leasehold; put it on your PATH with:'
	@echo '  export PATH="$$PWD/.bin:$$PATH"'

## release: static binaries (CGO_ENABLED=0, version stamped as by build)
## for RELEASE_PLATFORMS into dist/, named leasehold-<os>-<arch>, with
## their sha256 sums in dist/SHA256SUMS (check with sha256sum -c).
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
release:
	rm -rf dist && mkdir -p dist
	@for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "go build leasehold-$$os-$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "-s -w $(LDFLAGS)" \
	    -o dist/leasehold-$$os-$$arch ./cmd/leasehold || exit 1; \
	done
	cd dist && sha256sum leasehold-* > SHA256SUMS && cat SHA256SUMS

## test: every test, with the race detector, PostgreSQL included (the test
## database is created when missing).
test: $(BIN)/grpcurl ensure-test-db
	go test $(GO_TEST_FLAGS) ./...

## test-long: the long end-to-end scenarios (build tag `long`, names
## TestLong*), run by .ci/run after make test.
test-long: $(BIN)/grpcurl ensure-test-db
	go test $(GO_TEST_FLAGS) -tags long -run '^TestLong' -timeout 30m ./...

## ensure-test-db: create the database of LEASEHOLD_TEST_DATABASE_URL when
## the server has none (no psql needed).
ensure-test-db:
	go run ./internal/testkit/pgtest/cmd/ensuredb

## run: start the coordinator on the embedded SQLite default.
run:
	go run ./cmd/leasehold serve

## bench: store and dispatch benchmarks, 6 runs each for benchstat.
bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./... | tee bench.txt

## bench-compare: Leasehold vs River (bench/river, its own module), run by
## run, ROUNDS rounds of MODES; prints every run, then medians and ratios.
bench-compare:
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/leasehold ./cmd/leasehold
	cd bench/river && go build -o $(BIN)/river-bench .
	$(BIN)/leasehold bench compare --river-bin $(BIN)/river-bench \
	  --rounds $(ROUNDS) --modes "$(MODES)" --database-url "$(LEASEHOLD_BENCH_DATABASE_URL)" $(BENCH_FLAGS)

## fuzz: run every fuzz target for FUZZTIME each (make test runs only
## their seed corpora).
fuzz:
	@for pkg in $$(go list ./...); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$(go list -f '{{.Dir}}' $$pkg)/*_test.go 2>/dev/null | cut -c6-); do \
	    echo "fuzz $$pkg $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## helm: install the pinned helm into ./.bin.
helm: $(BIN)/helm

## manifests: render deploy/kubernetes/ from the Helm chart with default
## values (without the `helm test` pod, which only helm runs).
manifests: $(BIN)/helm
	deploy/render.sh --skip-tests > deploy/kubernetes/leasehold.yaml.tmp
	mv deploy/kubernetes/leasehold.yaml.tmp deploy/kubernetes/leasehold.yaml

## image: build the container image and run it once (deploy/image.sh).
image:
	deploy/image.sh

## deploy-check: helm lint, the strict manifest test, the image (deploy/ci.sh).
deploy-check:
	deploy/ci.sh

## prometheus-check: a real Prometheus (Debian's package, installed when
## missing) scrapes a real leasehold serve on loopback and must see the
## queue-depth metric (deploy/prometheus-check.sh).
prometheus-check:
	deploy/prometheus-check.sh

clean:
	rm -rf $(BIN) bench.txt dist

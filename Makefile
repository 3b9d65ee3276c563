# causallab build and test entry points. `make test` is the README's test
# command and what .ci/run calls.
GO ?= go
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: all build deps test test-short vet bench fmt

all: build

build:
	$(GO) build -o bin/causallab ./cmd/causallab

# deps installs what a fresh machine lacks (Debian packages, the MySQL 9.7 root
# filesystem and Docker image), cached outside the repository.
deps:
	./scripts/ensure-mysql.sh

# test: every package, integration tests against real MySQL included.
test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 45m ./...

# test-short: unit tests only (no MySQL needed).
test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# causallab build and test entry points. `make test` is the README's test
# command and what .ci/run calls.
GO ?= go
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: all build deps test test-proxy-multiplex test-driver-suite test-docker test-short vet bench fmt mtr-sample

all: build

build:
	$(GO) build -o bin/causallab ./cmd/causallab

# deps installs what a fresh machine lacks (Debian packages: mmdebstrap and
# sysbench; the MySQL 9.7, MariaDB 11.8 and PostgreSQL 18 root filesystems
# and Docker images, cached outside the repository).
deps:
	./scripts/ensure-engine.sh mysql
	./scripts/ensure-engine.sh mariadb
	./scripts/ensure-engine.sh postgres
	./scripts/install-bench-tools.sh

# test: every package, integration tests against real MySQL, MariaDB and
# PostgreSQL included; the proxy's integration tests again with
# multiplexing on (test-proxy-multiplex); then go-sql-driver/mysql's own
# suite direct and through the proxy (scripts/driver-suite.sh: about 2
# minutes, each run bounded by CAUSALLAB_DRIVER_SUITE_TIMEOUT).
test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 45m ./...
	$(MAKE) test-proxy-multiplex
	$(MAKE) test-driver-suite
	$(MAKE) test-docker

# test-proxy-multiplex: package proxy's tests with every test's proxy
# multiplexed unless the test sets it (CAUSALLAB_PROXY_TEST_MULTIPLEX=1,
# docs/proxy.md "Multiplexing"), but for TestHostileSuite (40 s: its
# attacks are on the client gate and the limits, most of them before a
# statement reaches a backend connection; it passed multiplexed in every
# full run of the suite). About 2 minutes on an idle two-core machine.
test-proxy-multiplex:
	CAUSALLAB_PROXY_TEST_MULTIPLEX=1 $(GO) test -count=1 -timeout 20m -skip '^TestHostileSuite$$' ./proxy/

# test-driver-suite: go-sql-driver/mysql's suite must pass through the proxy
# as it passes direct, multiplexed or not, but for scripts/driver-suite.allow
# (docs/proxy-sessions.md, "MySQL compatibility").
test-driver-suite:
	CAUSALLAB_DRIVER_SUITE_TIMEOUT=$${CAUSALLAB_DRIVER_SUITE_TIMEOUT:-10m} ./scripts/driver-suite.sh
	CAUSALLAB_DRIVER_SUITE_TIMEOUT=$${CAUSALLAB_DRIVER_SUITE_TIMEOUT:-10m} CAUSALLAB_DRIVER_SUITE_MULTIPLEX=true ./scripts/driver-suite.sh

# mtr-sample: MySQL's own main suite, a sample of 41 cases, direct and
# through the proxy, multiplexed or not (scripts/mtr-suite.sh, ~20 min;
# not part of test; docs/proxy-sessions.md "MySQL's own test suite").
mtr-sample:
	./scripts/mtr-suite.sh --fresh-every 10 --cases-file scripts/mtr-sample.cases

# test-docker: compose's integration tests again on the docker backend, when
# a Docker engine answers (the local backend ran in `test`).
test-docker:
	@if docker info >/dev/null 2>&1; then \
		CAUSALLAB_TEST_BACKEND=docker $(GO) test -count=1 -timeout 15m ./compose/...; \
	else echo "test-docker: no Docker engine answers: docker backend tests NOT run"; fi

# test-short: unit tests only (no MySQL needed).
test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

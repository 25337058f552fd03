# `make run` and `make test` work on a fresh machine; see README.md.
GO ?= go
# Where make build (and so make run) puts the binary.
BIN ?= bin/seckill
SERVICES := deploy/local/services.sh
# The tests read the addresses of the test services from these variables.
TEST_ENV = eval "$$($(SERVICES) env)"

.PHONY: run demo test build vet services-up services-down schemathesis

# Built, then run: go run exits 1 when interrupted, so make would end a clean Ctrl-C with an error.
run: build ## start api + consumer + compensator on embedded Kafka, Redis and SQLite
	$(BIN) dev

# The fault tests (faults_test.go) spend their time waiting on servers and processes, not on the
# CPU: four at once halve the root package's time even on 2 cores (go test's default is GOMAXPROCS).
TEST_PARALLEL ?= 4
# Built, then run, as make run: a Ctrl-C of go run ended a clean stop with "make: *** ... Error 1".
demo: build ## a small flash sale against the running `make run`, for the console (http://127.0.0.1:8080/console) to show
	$(BIN) demo

# What tests save with t.ArtifactDir (the console's screenshot) stays under
# $(TEST_ARTIFACTS)/_artifacts/ (go test -artifacts); without it, it goes with the test.
TEST_ARTIFACTS ?= $(CURDIR)/.test-artifacts
test: services-up ## every test, against real Redis, PostgreSQL and Kafka (started if needed)
	# -p 1: one package's tests at a time, so that the fault and topology stories, which count
	# every 503 and time every hand-off, never share the two cores with another package's.
	mkdir -p $(TEST_ARTIFACTS)
	$(TEST_ENV) && $(GO) test -race -count=1 -timeout 15m -p 1 -parallel $(TEST_PARALLEL) \
		-artifacts -outputdir $(TEST_ARTIFACTS) ./...
	cd deploy/validate && $(GO) test -race -count=1 ./...
	GO=$(GO) api/schemathesis.sh

schemathesis: ## schemathesis (PyPI, cached) against a live `seckill dev`: no 5xx, nothing outside api/openapi.yaml
	GO=$(GO) api/schemathesis.sh

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) .

vet:
	$(GO) vet ./...
	cd deploy/validate && $(GO) vet ./...

services-up: ## start (installing if needed) Redis, PostgreSQL and Kafka for the tests
	$(SERVICES) up

services-down:
	$(SERVICES) down

# The issue's sizes (ten to twelve minutes on a 2-core machine); `make bench BENCH_FLAGS=--quick`
# runs the set in a minute or two, BENCH_FLAGS=--scenarios=drain,row-at-a-time some of it.
BENCH_FLAGS ?=
.PHONY: bench
bench: services-up ## seckill against its baselines on the test services; writes bench/results/ and README's table
	$(TEST_ENV) && $(GO) run . bench --redis-url "$$SECKILL_TEST_REDIS_URL" --postgres-url "$$SECKILL_TEST_POSTGRES_URL" \
		--kafka-brokers "$$SECKILL_TEST_KAFKA_BROKERS" --readme README.md $(BENCH_FLAGS)

# The fault tests' chaos for a chosen time, on private servers of its own (not in CI): api and
# consumer kills at their failpoints, Redis losing its data, Kafka and PostgreSQL stopped and
# killed. Prints `seckill audit` every few seconds and exits non-zero on a violation.
# SOAK_FAULTS, a regular expression, picks some of the faults (e.g. SOAK_FAULTS='postgres|kafka').
SOAK_DURATION ?= 10m
SOAK_FAULTS ?=
.PHONY: soak
soak: ## chaos for SOAK_DURATION (default 10m) on private servers; the audit every few seconds
	$(GO) test -count=1 -run '^TestSoak$$' -timeout 0 -v . -args -soak=$(SOAK_DURATION) -soak-faults='$(SOAK_FAULTS)'

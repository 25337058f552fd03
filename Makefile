# `make run` and `make test` work on a fresh machine; see README.md.
GO ?= go
SERVICES := deploy/local/services.sh
# The tests read the addresses of the test services from these variables.
TEST_ENV = eval "$$($(SERVICES) env)"

.PHONY: run test test-fast build vet services-up services-down schemathesis

run: ## start api + consumer + compensator on embedded Kafka, Redis and SQLite
	$(GO) run . dev

test: services-up ## every test, against real Redis, PostgreSQL and Kafka (started if needed)
	$(TEST_ENV) && $(GO) test -count=1 -timeout 15m ./...
	cd deploy/validate && $(GO) test -count=1 ./...
	GO=$(GO) api/schemathesis.sh

schemathesis: ## schemathesis (PyPI, cached) against a live `seckill dev`: no 5xx, nothing outside api/openapi.yaml
	GO=$(GO) api/schemathesis.sh

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/seckill .

vet:
	$(GO) vet ./...
	cd deploy/validate && $(GO) vet ./...

services-up: ## start (installing if needed) Redis, PostgreSQL and Kafka for the tests
	$(SERVICES) up

services-down:
	$(SERVICES) down

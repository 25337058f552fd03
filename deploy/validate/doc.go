// Package validate checks the deployment files in deploy/ without a Docker daemon
// or a cluster: deploy/compose.yaml through the Compose specification's own loader,
// every manifest under deploy/k8s/ strictly decoded into the Kubernetes API types
// (an unknown or misspelled field fails, as it does with the API server's strict
// field validation), their NetworkPolicies evaluated for who reaches which port, and the
// deploy/k8s-try overlay checked against them, deploy/Dockerfile through BuildKit's parser (and the root .dockerignore, which must keep
// filled-in Secrets and .env files out of the build context), and the alert rules
// (deploy/prometheus, through promtool) and the Grafana dashboard (deploy/grafana) against the
// metrics the seckill code registers, with Prometheus's PromQL parser.
//
// It is a module of its own so that these heavy dependencies stay out of the
// seckill binary's go.mod. Run it with:
//
//	cd deploy/validate && go test ./...
//
// Each check returns the list of problems it found rather than stopping at the
// first, and the tests in reject_test.go prove that the checks catch the mistakes
// they exist for by feeding them broken copies of the real files.
package validate

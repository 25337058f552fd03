package validate

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// These tests break a copy of the real files in one way each and expect the
// checks to say so: a check that accepts everything would pass the tests above.

// k8sFiles copies deploy/k8s into memory.
func k8sFiles(tb testing.TB) fstest.MapFS {
	tb.Helper()
	fsys := fstest.MapFS{}
	root := os.DirFS(k8sDir(tb))
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, p)
		fsys[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return fsys
}

func TestK8sRejects(t *testing.T) {
	edit := func(file, old, new string) func(testing.TB, fstest.MapFS) {
		return func(tb testing.TB, fsys fstest.MapFS) {
			tb.Helper()
			fsys[file] = &fstest.MapFile{Data: []byte(mustReplace(tb, string(fsys[file].Data), old, new))}
		}
	}
	tests := []struct {
		name   string
		break_ func(testing.TB, fstest.MapFS)
		want   string
	}{
		{"misspelled field", edit("api-deployment.yaml", "readinessProbe:", "readinesProbe:"), `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"field in the wrong case", edit("consumer-deployment.yaml", "containerPort:", "ContainerPort:"), "unknown field"},
		{"duplicate key", edit("api-deployment.yaml", "  replicas: 3\n", "  replicas: 3\n  replicas: 2\n"), "already set"},
		{"unquoted number in a ConfigMap", edit("configmap.yaml", `SECKILL_PARTITIONS: "12"`, "SECKILL_PARTITIONS: 12"), "cannot unmarshal number"},
		{"unknown kind", edit("api-service.yaml", "apiVersion: v1\nkind: Service", "apiVersion: networking.k8s.io/v1\nkind: Ingress"), "unexpected kind networking.k8s.io/v1/Ingress"},
		{"image tag latest", edit("kustomization.yaml", "newTag: REPLACE_ME", "newTag: latest"), "seckill-api: image seckill:latest (pull policy IfNotPresent): a re-push of a floating tag rolls nothing out"},
		{"image without a tag", edit("kustomization.yaml", "    newTag: REPLACE_ME\n", ""), "seckill-migrate: image seckill (pull policy IfNotPresent)"},
		{"role pinned to latest itself", func(tb testing.TB, fsys fstest.MapFS) {
			edit("kustomization.yaml", "    newTag: REPLACE_ME\n", "")(tb, fsys)
			edit("consumer-deployment.yaml", "image: seckill\n", "image: seckill:latest\n")(tb, fsys)
		}, "seckill-consumer: image seckill:latest"},
		{"unknown kustomization field", edit("kustomization.yaml", "images:", "imagez:"), `unknown field "imagez"`},
		{"file not listed", func(_ testing.TB, fsys fstest.MapFS) {
			fsys["extra.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")}
		}, "extra.yaml: not listed in kustomization.yaml"},
		{"listed file missing", func(_ testing.TB, fsys fstest.MapFS) { delete(fsys, "api-pdb.yaml") }, "resource api-pdb.yaml does not exist"},
		{"infra file not listed", edit("infra/kustomization.yaml", "  - redis.yaml\n", ""), "infra/redis.yaml: not listed"},
		{"ConfigMap key missing", edit("configmap.yaml", "SECKILL_BATCH_SIZE:", "SECKILL_BATCHSIZE:"), "reads key SECKILL_BATCH_SIZE, which ConfigMap seckill-config lacks"},
		{"Secret missing", edit("kustomization.yaml", "  - secret.yaml\n", ""), "reads Secret seckill-secrets, which is not in ."},
		{"probe on an undeclared port", edit("api-deployment.yaml", "path: /readyz\n              port: metrics", "path: /readyz\n              port: web"), "readiness probe port web is not a declared container port"},
		{"api probe on the capped public port", edit("api-deployment.yaml", "path: /healthz\n              port: metrics\n            periodSeconds: 10", "path: /healthz\n              port: http\n            periodSeconds: 10"), "seckill-api: liveness probe gets /healthz on port http, want /healthz on 9090"},
		{"probe on another port than the listener", edit("compensator-deployment.yaml", `value: ":9090"`, `value: ":9091"`), "listens on 9091"},
		{"selector misses the template", edit("consumer-deployment.yaml", "    matchLabels:\n      app.kubernetes.io/name: seckill", "    matchLabels:\n      app.kubernetes.io/name: seckil"), "does not match the template labels"},
		{"Service targets an undeclared port", edit("api-service.yaml", "targetPort: http", "targetPort: grpc"), "targets grpc"},
		{"StatefulSet without its headless Service", edit("infra/redis.yaml", "serviceName: redis-headless", "serviceName: redis-hl"), `serviceName "redis-hl" is not a Service`},
		{"role on another image", edit("compensator-deployment.yaml", "image: seckill", "image: busybox:1.36"), `image "busybox:1.36", want the seckill image`},
		{"role without Kafka", edit("consumer-deployment.yaml", "- name: SECKILL_KAFKA_BROKERS", "- name: SECKILL_KAFKA_BROKER"), "lacks env SECKILL_KAFKA_BROKERS"},
		{"short grace period", edit("consumer-deployment.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 5"), "terminationGracePeriodSeconds must be 30"},
		{"api without 3 replicas", edit("api-deployment.yaml", "replicas: 3", "replicas: 1"), "want at least 3 replicas"},
		{"real secret committed", edit("secret.yaml", "SECKILL_ADMIN_TOKEN: REPLACE_ME", "SECKILL_ADMIN_TOKEN: s3cr3t"), "SECKILL_ADMIN_TOKEN is not a REPLACE_ME placeholder"},
		{"placeholder long enough to be a secret", edit("secret.yaml", "SECKILL_JWT_SECRET: REPLACE_ME\n", "SECKILL_JWT_SECRET: REPLACE_ME-jwt-secret-of-at-least-32-bytes\n"), "the placeholder of SECKILL_JWT_SECRET is 42 bytes"},
		{"infra placeholder long enough", edit("infra/postgres-secret.yaml", "POSTGRES_PASSWORD: REPLACE_ME", "POSTGRES_PASSWORD: REPLACE_ME-a-password-of-32-bytes-or-so"), "the placeholder of POSTGRES_PASSWORD is"},
		{"one compensator", edit("compensator-deployment.yaml", "replicas: 2", "replicas: 1"), "seckill-compensator: want at least 2 replicas"},
		{"consumer without a PodDisruptionBudget", func(tb testing.TB, fsys fstest.MapFS) {
			edit("kustomization.yaml", "  - consumer-pdb.yaml\n", "")(tb, fsys)
			delete(fsys, "consumer-pdb.yaml")
		}, "seckill-consumer: 2 replicas and no PodDisruptionBudget selects it"},
		{"PodDisruptionBudget lets all go", edit("compensator-pdb.yaml", "maxUnavailable: 1", "maxUnavailable: 2"), "PodDisruptionBudget seckill-compensator must set maxUnavailable: 1"},
		{"PodDisruptionBudget by minAvailable", edit("consumer-pdb.yaml", "maxUnavailable: 1", "minAvailable: 0"), "PodDisruptionBudget seckill-consumer must set maxUnavailable: 1"},
		{"drain hangs on unready pods", edit("api-pdb.yaml", "  unhealthyPodEvictionPolicy: AlwaysAllow\n", ""), "seckill-api: unhealthyPodEvictionPolicy must be AlwaysAllow"},
		{"unready pods evicted only within the budget", edit("consumer-pdb.yaml", "unhealthyPodEvictionPolicy: AlwaysAllow", "unhealthyPodEvictionPolicy: IfHealthyBudget"), "seckill-consumer: unhealthyPodEvictionPolicy must be AlwaysAllow"},
		{"compensators not spread", edit("compensator-deployment.yaml", "topologyKey: kubernetes.io/hostname", "topologyKey: topology.kubernetes.io/zone"), "seckill-compensator: 2 replicas not spread over nodes"},
		{"spread counts the old revision", edit("compensator-deployment.yaml", "          matchLabelKeys: [pod-template-hash]\n", ""), "seckill-compensator: topologySpreadConstraint on kubernetes.io/hostname without matchLabelKeys [pod-template-hash]"},
		{"spread selects other pods", edit("consumer-deployment.yaml", "              app.kubernetes.io/component: consumer\n      containers:", "              app.kubernetes.io/component: api\n      containers:"), "seckill-consumer: 2 replicas not spread over nodes"},
		{"no startup probe", edit("compensator-deployment.yaml", "          startupProbe:\n            httpGet:\n              path: /healthz\n              port: metrics\n            periodSeconds: 5\n            failureThreshold: 120\n", ""), "seckill-compensator: startup probe must be an HTTP GET of /healthz"},
		{"startup probe on /readyz", edit("consumer-deployment.yaml", "startupProbe:\n            httpGet:\n              path: /healthz", "startupProbe:\n            httpGet:\n              path: /readyz"), "seckill-consumer: startup probe gets /readyz"},
		{"readiness probe gives up before readyz answers", edit("api-deployment.yaml", "            timeoutSeconds: 3\n", ""), "seckill-api: readiness probe timeoutSeconds 1, want more than the 2 s"},
		{"startup probe too short", edit("api-deployment.yaml", "failureThreshold: 120", "failureThreshold: 12"), "startup probe allows 5 s x 12"},
		{"api grace shorter than its stop", edit("api-deployment.yaml", "terminationGracePeriodSeconds: 40", "terminationGracePeriodSeconds: 30"), "seckill-api: terminationGracePeriodSeconds must be 40"},
		{"api preStop longer than the grace allows", edit("api-deployment.yaml", "sleep:\n                seconds: 5", "sleep:\n                seconds: 15"), "terminationGracePeriodSeconds 40 < preStop 15 s"},
		{"api drain delay longer than the grace allows", edit("api-deployment.yaml", "            - name: SECKILL_ADDR\n", "            - name: SECKILL_DRAIN_DELAY\n              value: 20s\n            - name: SECKILL_ADDR\n"), "terminationGracePeriodSeconds 40 < preStop 5 s + drain delay 20s + shutdown 15 s + producer flush 10 s = 50 s"},
		{"api behind an Ingress trusts no X-Forwarded-For", edit("configmap.yaml", `SECKILL_TRUST_PROXY_HEADERS: "true"`, `SECKILL_TRUST_PROXY_HEADERS: "false"`), `SECKILL_TRUST_PROXY_HEADERS="false", want "true"`},
		{"api caps connections per proxy address", edit("api-deployment.yaml", "            - name: SECKILL_MAX_CONNS_PER_ADDR\n              valueFrom:\n                configMapKeyRef:\n                  name: seckill-config\n                  key: SECKILL_MAX_CONNS_PER_ADDR\n", ""), `SECKILL_MAX_CONNS_PER_ADDR="", want "0"`},
		{"api derives its order id secret from the JWT secret", edit("api-deployment.yaml", "            - name: SECKILL_ORDER_ID_SECRET\n              valueFrom:\n                secretKeyRef:\n                  name: seckill-secrets\n                  key: SECKILL_ORDER_ID_SECRET\n", ""), "SECKILL_ORDER_ID_SECRET must come from a Secret"},
		{"payment service left with the admin token", edit("api-deployment.yaml", "            - name: SECKILL_PAYMENT_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: seckill-secrets\n                  key: SECKILL_PAYMENT_TOKEN\n", ""), "SECKILL_PAYMENT_TOKEN must come from a Secret"},
		{"api connections outgrow its memory", edit("api-deployment.yaml", "              value: \"10000\"", "              value: \"30000\""), `SECKILL_MAX_CONNS="30000": 32 KB each beside 96 MB do not fit GOMEMLIMIT 460MiB`},
		{"api connections capped by open files only", edit("api-deployment.yaml", "            - name: SECKILL_MAX_CONNS\n              value: \"10000\"\n", ""), "no SECKILL_MAX_CONNS"},
		{"migrate Job kept for 10 minutes", edit("migrate-job.yaml", "ttlSecondsAfterFinished: 60", "ttlSecondsAfterFinished: 600"), "ttlSecondsAfterFinished must be set and at most 60"},
		{"migrate Job kept forever", edit("migrate-job.yaml", "  ttlSecondsAfterFinished: 60\n", ""), "ttlSecondsAfterFinished must be set and at most 60"},
		{"service account token mounted", edit("consumer-deployment.yaml", "      automountServiceAccountToken: false\n", ""), "seckill-consumer: automountServiceAccountToken is not false"},
		{"infra service account token mounted", edit("infra/redis.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true"), "StatefulSet redis: automountServiceAccountToken is not false"},
		{"migrate Job loses its failed log", edit("migrate-job.yaml", "restartPolicy: Never", "restartPolicy: OnFailure"), `seckill-migrate: restartPolicy "OnFailure", want Never`},
		{"privilege escalation", edit("migrate-job.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"), "allowPrivilegeEscalation is not false"},
		{"broker not in infra", edit("configmap.yaml", "SECKILL_KAFKA_BROKERS: kafka:9092", "SECKILL_KAFKA_BROKERS: kafka:9094"), "points at kafka:9094"},
		{"Redis password in the ConfigMap", func(tb testing.TB, fsys fstest.MapFS) {
			edit("secret.yaml", "  SECKILL_REDIS_URL: redis://:REPLACE_ME@redis:6379/0\n", "")(tb, fsys)
			edit("configmap.yaml", "  SECKILL_KAFKA_BROKERS: kafka:9092\n", "  SECKILL_KAFKA_BROKERS: kafka:9092\n  SECKILL_REDIS_URL: redis://:REPLACE_ME@redis:6379/0\n")(tb, fsys)
			for _, f := range []string{"api-deployment.yaml", "consumer-deployment.yaml", "compensator-deployment.yaml"} {
				edit(f, "                secretKeyRef:\n                  name: seckill-secrets\n                  key: SECKILL_REDIS_URL", "                configMapKeyRef:\n                  name: seckill-config\n                  key: SECKILL_REDIS_URL")(tb, fsys)
			}
		}, "SECKILL_REDIS_URL is a URL with a password: credentials go in a Secret"},
		{"Sentinel password in the ConfigMap", edit("configmap.yaml", "  SECKILL_KAFKA_BROKERS: kafka:9092\n", "  SECKILL_KAFKA_BROKERS: kafka:9092\n  SECKILL_SENTINELS: redis+sentinel://s1:26379/m/0?sentinel_password=x\n"), "SECKILL_SENTINELS is a URL with a password"},
		{"role reads the Redis URL from a ConfigMap", func(tb testing.TB, fsys fstest.MapFS) {
			edit("configmap.yaml", "  SECKILL_KAFKA_BROKERS: kafka:9092\n", "  SECKILL_KAFKA_BROKERS: kafka:9092\n  SECKILL_REDIS_URL: redis://redis:6379/0\n")(tb, fsys)
			edit("consumer-deployment.yaml", "                secretKeyRef:\n                  name: seckill-secrets\n                  key: SECKILL_REDIS_URL", "                configMapKeyRef:\n                  name: seckill-config\n                  key: SECKILL_REDIS_URL")(tb, fsys)
		}, "seckill-consumer: SECKILL_REDIS_URL must come from a Secret"},
		{"Redis password mismatch", edit("infra/redis-secret.yaml", "REDIS_PASSWORD: REPLACE_ME", "REDIS_PASSWORD: REPLACE_ME-too"), "SECKILL_REDIS_URL's password does not match"},
		{"infra Redis open to the cluster", edit("infra/redis.yaml", `, "--requirepass", "$(REDIS_PASSWORD)",`, ","), "redis runs without --requirepass"},
		{"infra Redis grows until killed", edit("infra/redis.yaml", `"--maxmemory", "512mb", `, ""), "redis runs without --maxmemory"},
		{"infra Redis maxmemory at its limit", edit("infra/redis.yaml", `"--maxmemory", "512mb"`, `"--maxmemory", "1gb"`), "redis --maxmemory 1gb, want more than 0 and at most 60% of its memory limit 1Gi"},
		{"infra Redis evicts", edit("infra/redis.yaml", `"--maxmemory-policy", "noeviction"`, `"--maxmemory-policy", "volatile-lru"`), `redis --maxmemory-policy "volatile-lru", want noeviction`},
		{"infra PostgreSQL killed in its initdb", edit("infra/postgres.yaml", "          startupProbe:\n            tcpSocket:\n              port: postgres\n            periodSeconds: 5\n            failureThreshold: 60\n", ""), "postgres container postgres: a liveness probe without a startup probe"},
		{"infra PostgreSQL ready on its init socket", edit("infra/postgres.yaml", `["pg_isready", "-h", "127.0.0.1", `, `["pg_isready", `), "readiness probe runs pg_isready without -h 127.0.0.1"},
		{"PostgreSQL password mismatch", edit("infra/postgres-secret.yaml", "POSTGRES_PASSWORD: REPLACE_ME", "POSTGRES_PASSWORD: REPLACE_ME-too"), "password does not match"},
		{"infra PostgreSQL at its default max_connections", edit("infra/postgres.yaml", "          args: [\"-c\", \"max_connections=300\"]\n", ""), "need 220, but max_connections 100 leaves 97"},
		{"more consumers than PostgreSQL admits", edit("consumer-deployment.yaml", "replicas: 2", "replicas: 12"), "need 460, but max_connections 300 leaves 297"},
		{"production PostgreSQL without TLS", edit("secret.yaml", "seckill?sslmode=verify-full", "seckill?sslmode=disable"), `secret.yaml: SECKILL_POSTGRES_URL has sslmode="disable", want one of [verify-full verify-ca]`},
		{"production PostgreSQL unverified", edit("secret.yaml", "seckill?sslmode=verify-full", "seckill?sslmode=require"), `SECKILL_POSTGRES_URL has sslmode="require"`},
		{"production PostgreSQL at lib/pq's default", edit("secret.yaml", "seckill?sslmode=verify-full", "seckill"), `SECKILL_POSTGRES_URL has sslmode=""`},
		{"infra in another namespace", edit("infra/kustomization.yaml", "namespace: seckill", "namespace: data"), "namespace data, want seckill"},
		{"no default deny", edit("networkpolicy.yaml", "  podSelector: {}\n  policyTypes: [Ingress]\n", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/component: api\n  policyTypes: [Ingress]\n"), "seckill-migrate: its pods are selected by no default-deny NetworkPolicy"},
		{"network policies not applied", edit("kustomization.yaml", "  - networkpolicy.yaml\n", ""), "networkpolicy.yaml: not listed in kustomization.yaml"},
		{"api public port closed", edit("networkpolicy.yaml", "        - port: 8080\n", "        - port: 8081\n"), "seckill-api: its public port 8080 is admitted from nowhere outside namespace seckill"},
		{"api public port only from its own namespace", edit("networkpolicy.yaml", "    - ports:\n        - port: 8080\n", "    - from:\n        - podSelector: {}\n      ports:\n        - port: 8080\n"), "seckill-api: its public port 8080 is admitted from nowhere outside namespace seckill"},
		{"Service port closed", edit("networkpolicy.yaml", "        - port: 8080\n", "        - port: 8081\n"), "seckill-api: port 8080 (Service seckill-api) is admitted from nowhere"},
		{"ops port open to every namespace", edit("networkpolicy.yaml", "            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n", "            matchLabels: {}\n"), "seckill-consumer: port 9090 is admitted from a pod of namespace default"},
		{"ops port open to all", edit("networkpolicy.yaml", "    - from:\n        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n      ports:", "    - ports:"), "seckill-compensator: port 9090 is admitted from an address outside the cluster"},
		{"Prometheus cannot scrape", edit("networkpolicy.yaml", "kubernetes.io/metadata.name: monitoring", "kubernetes.io/metadata.name: observability"), "seckill-api: its scrape port 9090 (prometheus.io/port) is not admitted from Prometheus in namespace monitoring"},
		{"every port of the api open", edit("networkpolicy.yaml", "    - ports:\n        - port: 8080\n          protocol: TCP\n", "    - {}\n"), "seckill-api: port 9090 is admitted from an address outside the cluster"},
		{"roles' egress closed", edit("networkpolicy.yaml", "  podSelector: {}\n  policyTypes: [Ingress]\n", "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n"), "seckill-migrate: egress to postgres:5432 (SECKILL_POSTGRES_URL) is admitted by no policy"},
		{"roles' egress without DNS", edit("networkpolicy.yaml", "  podSelector: {}\n  policyTypes: [Ingress]\n", "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  egress:\n    - ports:\n        - port: 6379\n        - port: 9092\n        - port: 5432\n        - port: 53\n"), "seckill-api: egress to DNS (53/UDP) is admitted by no policy"},
		{"roles' egress without Kafka", edit("networkpolicy.yaml", "  podSelector: {}\n  policyTypes: [Ingress]\n", "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  egress:\n    - ports:\n        - port: 6379\n        - port: 5432\n        - port: 53\n          protocol: UDP\n        - port: 53\n"), "seckill-consumer: egress to kafka:9092 (SECKILL_KAFKA_BROKERS) is admitted by no policy"},
		{"migrate cannot reach PostgreSQL", edit("infra/networkpolicy.yaml", "values: [api, consumer, compensator, migrate]", "values: [api, consumer, compensator]"), "seckill-migrate: SECKILL_POSTGRES_URL (postgres:5432) cannot reach infra/postgres.yaml: apps/v1/StatefulSet postgres on 5432"},
		{"consumer cannot reach Kafka", edit("infra/networkpolicy.yaml", "              - {key: app.kubernetes.io/component, operator: In, values: [api, consumer, compensator]}\n      ports:\n        - port: 9092", "              - {key: app.kubernetes.io/component, operator: In, values: [api, compensator]}\n      ports:\n        - port: 9092"), "seckill-consumer: SECKILL_KAFKA_BROKERS (kafka:9092) cannot reach infra/kafka.yaml: apps/v1/StatefulSet kafka on 9092"},
		{"migrate reaches Redis", edit("infra/networkpolicy.yaml", "              - {key: app.kubernetes.io/component, operator: In, values: [api, consumer, compensator]}\n      ports:\n        - port: 6379", "              - {key: app.kubernetes.io/component, operator: In, values: [api, consumer, compensator, migrate]}\n      ports:\n        - port: 6379"), "redis: port 6379 is admitted from migrate-job.yaml: batch/v1/Job seckill-migrate"},
		{"Redis open to the namespace", edit("infra/networkpolicy.yaml", "    - from:\n        - podSelector:\n            matchExpressions:\n              - {key: app.kubernetes.io/name, operator: In, values: [seckill]}\n              - {key: app.kubernetes.io/component, operator: In, values: [api, consumer, compensator]}\n      ports:\n        - port: 6379", "    - from:\n        - podSelector: {}\n      ports:\n        - port: 6379"), "redis: port 6379 is admitted from a pod of the namespace that is no role"},
		{"PostgreSQL open to every seckill pod", edit("infra/networkpolicy.yaml", "              - {key: app.kubernetes.io/component, operator: In, values: [api, consumer, compensator, migrate]}\n", ""), "postgres: port 5432 is admitted from an operator's seckill pod of no role"},
		{"Kafka open to all", edit("infra/networkpolicy.yaml", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: kafka\n  policyTypes: [Ingress]\n  ingress:\n", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: kafka\n  policyTypes: [Ingress]\n  ingress:\n    - {}\n"), "kafka: port 9093 is admitted from an address outside the cluster"},
		{"infra applied alone is open", edit("infra/networkpolicy.yaml", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redis\n", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redis-old\n"), "infra/redis.yaml: apps/v1/StatefulSet redis: selected by no NetworkPolicy of infra/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := k8sFiles(t)
			tt.break_(t, fsys)
			bundles, probs, err := loadBundles(fsys)
			if err != nil {
				t.Fatal(err)
			}
			expectProblem(t, append(probs, checkK8s(bundles)...), tt.want)
		})
	}
}

func TestComposeRejects(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"misspelled key", "    healthcheck:\n      test: [\"CMD\", \"redis-cli\"", "    healthchek:\n      test: [\"CMD\", \"redis-cli\"", "healthchek"},
		{"migrate not awaited", "      condition: service_completed_successfully", "      condition: service_started", "depends_on"},
		{"api port not published", `"127.0.0.1:8080:8080"`, `"127.0.0.1:18080:8080"`, "api must publish 8080:8080"},
		{"api published on every interface", `"127.0.0.1:8080:8080"`, `"8080:8080"`, `compose: api publishes 8080 on "", want 127.0.0.1`},
		{"role without Kafka", `SECKILL_BATCH_SIZE: "500"`, "SECKILL_BATCH_SIZE: \"500\"\n      SECKILL_KAFKA_BROKERS: \"\"", "consumer lacks SECKILL_KAFKA_BROKERS"},
		{"role from another Dockerfile", `command: ["api"]`, "command: [\"api\"]\n    build:\n      context: ..\n      dockerfile: deploy/api.Dockerfile", `api builds "deploy/api.Dockerfile"`},
		{"wrong role", `command: ["compensator"]`, `command: ["consumer"]`, "compensator command"},
		{"api derives its order id secret from the JWT secret", "      SECKILL_ORDER_ID_SECRET: ${SECKILL_ORDER_ID_SECRET:-compose-only-order-ids-change-me-0123}\n", "", "api lacks SECKILL_ORDER_ID_SECRET"},
		{"payment service left with the admin token", "      SECKILL_PAYMENT_TOKEN: ${SECKILL_PAYMENT_TOKEN:-compose-payment-token-change-me-32b}\n", "", "api lacks SECKILL_PAYMENT_TOKEN"},
		{"payment token too short", "compose-payment-token-change-me-32b}", "short}", "api lacks SECKILL_PAYMENT_TOKEN of at least 32 bytes"},
		{"PostgreSQL at its default max_connections", "    command: [\"postgres\", \"-c\", \"max_connections=300\"]\n", "", "need 140, but max_connections 100 leaves 97"},
		{"api connections capped by open files only", "      SECKILL_MAX_CONNS: \"10000\"\n", "", "compose: api: no SECKILL_MAX_CONNS"},
		{"seckill with a writable root", "  read_only: true\n", "", "compose: api wants read_only: true"},
		{"seckill keeps its capabilities", "  cap_drop: [ALL]\n", "", "compose: migrate wants read_only: true, cap_drop: [ALL]"},
		{"PostgreSQL healthy on its init socket", `"pg_isready", "-h", "127.0.0.1", `, `"pg_isready", `, "compose: postgres healthcheck runs pg_isready without -h 127.0.0.1"},
		{"GOMEMLIMIT past mem_limit", "  mem_limit: 512m\n", "  mem_limit: 256m\n", `compose: api GOMEMLIMIT "460MiB" is not 75-95% of mem_limit`},
		{"migrate restarts", "    restart: \"no\"\n", "", "migrate restart"},
		{"PostgreSQL password mismatch", "seckill:seckill@postgres", "seckill:other@postgres", "does not match the postgres service"},
		{"Redis fsync off", `"--appendfsync", "everysec"`, `"--appendfsync", "no"`, "--appendfsync everysec"},
		{"broker not advertised", "SECKILL_KAFKA_BROKERS: kafka:9092", "SECKILL_KAFKA_BROKERS: kafka:29092", `broker "kafka:29092"`},
		{"api stops as fast as the others", "    stop_grace_period: 40s\n", "", "api stop_grace_period is not 40s"},
		{"api healthcheck through the capped public port", "during a crowd.\n    healthcheck:\n      test: [\"CMD\", \"/healthcheck\", \"http://127.0.0.1:9090/readyz\"]",
			"during a crowd.\n    healthcheck:\n      test: [\"CMD\", \"/healthcheck\", \"http://127.0.0.1:8080/readyz\"]", "api healthcheck must run /healthcheck against port 9090"},
		{"waits on a service without healthcheck", "during a crowd.\n    healthcheck:\n      test: [\"CMD\", \"/healthcheck\", \"http://127.0.0.1:9090/readyz\"]",
			"during a crowd.\n    healthcheck:\n      disable: true", "waits for api to be healthy, but api has no healthcheck"},
	}
	content := string(readDeployFile(t, "compose.yaml"))
	repoRoot := filepath.Dir(deployDir(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var probs problems
			p, err := loadCompose(t, []byte(mustReplace(t, content, tt.old, tt.new)), nil)
			if err != nil {
				probs.addf("%v", err)
			} else {
				probs = checkCompose(p, repoRoot)
			}
			expectProblem(t, probs, tt.want)
		})
	}
}

func TestDockerignoreRejects(t *testing.T) {
	ok := ".git\ndeploy/\n**/.env\n"
	for _, tc := range []struct{ name, ignore, want string }{
		{"deploy in the context", ".git\n**/.env\n", "deploy/k8s/secret.yaml is in the build context"},
		{"compose's .env in the context", ".git\ndeploy/validate/\n", "deploy/.env is in the build context"},
		{"root .env in the context", ".git\ndeploy/\n", ".env is in the build context"},
		{"secret kept by a negation", ok + "!deploy/k8s/secret.yaml\n", "deploy/k8s/secret.yaml is in the build context"},
		{"sources left out", ok + "*.go\n", "leaves out main.go"},
		{"embedded files left out", ok + "**/*.lua\n", "leaves out lua/reserve.lua"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectProblem(t, checkDockerignore(tc.ignore), tc.want) })
	}
	if probs := checkDockerignore(ok); len(probs) > 0 {
		t.Errorf("a .dockerignore that leaves out deploy/ and every .env: %v", probs)
	}
}

func TestDockerfileRejects(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"root user", "USER 65532:65532", "USER root", "runs as \"root\""},
		{"root uid", "USER 65532:65532", "USER 0:0", "runs as \"0:0\""},
		{"other base image", "FROM gcr.io/distroless/static-debian12:nonroot\n", "FROM gcr.io/distroless/static-debian12\n", "final stage FROM gcr.io/distroless/static-debian12,"},
		{"shell-form entrypoint", `ENTRYPOINT ["/seckill"]`, "ENTRYPOINT /seckill", "ENTRYPOINT"},
		{"other entrypoint", `ENTRYPOINT ["/seckill"]`, `ENTRYPOINT ["/bin/seckill"]`, "ENTRYPOINT"},
		{"cgo on", "ENV CGO_ENABLED=0", "ENV CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"not trimmed", `go build -trimpath -ldflags "-s -w" -o /out/seckill`, `go build -o /out/seckill`, "-trimpath"},
		{"metrics port not exposed", "EXPOSE 8080 9090", "EXPOSE 8080", "does not EXPOSE 9090"},
		{"binary not copied", "COPY --from=build /out/seckill /seckill", "COPY --from=build /out/seckill /usr/bin/seckill", "must COPY /seckill"},
		{"Go without its patch release", "golang:1.26.8 AS build", "golang:1.26 AS build", "names no patch release"},
		{"Go older than go.mod", "golang:1.26.8 AS build", "golang:1.26.3 AS build", "older than go.mod's go 1.26.8"},
		{"no Go image", "golang:1.26.8 AS build", "debian:12 AS build", "want golang:1.26.8"},
	}
	goVersion := modGoVersion(t)
	src := string(readDeployFile(t, "Dockerfile"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectProblem(t, checkDockerfile([]byte(mustReplace(t, src, tt.old, tt.new)), goVersion), tt.want)
		})
	}
}

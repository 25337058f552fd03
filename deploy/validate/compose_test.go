package validate

import (
	"context"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// roles are the long-running seckill services; migrate is the one-shot fourth.
var roles = []string{"api", "consumer", "compensator"}

// commonEnv is what every seckill process needs, whatever its role.
var commonEnv = []string{"SECKILL_REDIS_URL", "SECKILL_POSTGRES_URL", "SECKILL_KAFKA_BROKERS"}

// listenEnv names the variable that sets the HTTP address a role serves its
// probes on.
var listenEnv = map[string]string{
	"api":         "SECKILL_ADDR",
	"consumer":    "SECKILL_METRICS_ADDR",
	"compensator": "SECKILL_METRICS_ADDR",
}

// wantDependsOn is the start order: infrastructure healthy, schema applied, and
// for the readers of the topics, the api (which creates them) healthy.
var wantDependsOn = map[string]map[string]string{
	"migrate": {
		"postgres": types.ServiceConditionHealthy,
	},
	"api": {
		"kafka":    types.ServiceConditionHealthy,
		"redis":    types.ServiceConditionHealthy,
		"postgres": types.ServiceConditionHealthy,
		"migrate":  types.ServiceConditionCompletedSuccessfully,
	},
	"consumer": {
		"kafka":    types.ServiceConditionHealthy,
		"redis":    types.ServiceConditionHealthy,
		"postgres": types.ServiceConditionHealthy,
		"migrate":  types.ServiceConditionCompletedSuccessfully,
		"api":      types.ServiceConditionHealthy,
	},
	"compensator": {
		"kafka":    types.ServiceConditionHealthy,
		"redis":    types.ServiceConditionHealthy,
		"postgres": types.ServiceConditionHealthy,
		"migrate":  types.ServiceConditionCompletedSuccessfully,
		"api":      types.ServiceConditionHealthy,
	},
}

// loadCompose loads content as deploy/compose.yaml with the Compose loader:
// schema validation, interpolation from env (and only env, so a developer's shell
// does not change the result), paths resolved against deploy/. No resource
// loader is configured, so nothing is fetched from the network.
func loadCompose(tb testing.TB, content []byte, env map[string]string) (*types.Project, error) {
	tb.Helper()
	dir := deployDir(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml"), Content: content}},
		Environment: types.Mapping(env),
	}, func(o *loader.Options) { o.ResolvePaths = true })
}

// checkCompose returns what is wrong with a loaded project. repoRoot is where the
// build context must point.
func checkCompose(p *types.Project, repoRoot string) problems {
	var probs problems

	want := append([]string{"kafka", "redis", "postgres", "migrate"}, roles...)
	for _, name := range want {
		if _, err := p.GetService(name); err != nil {
			probs.addf("compose: service %s missing", name)
		}
	}
	for _, name := range p.ServiceNames() {
		if !slices.Contains(want, name) {
			probs.addf("compose: unexpected service %s", name)
		}
	}

	seckill := append([]string{"migrate"}, roles...)
	var image string
	for _, name := range seckill {
		s, err := p.GetService(name)
		if err != nil {
			continue
		}
		if s.Build == nil {
			probs.addf("compose: %s has no build section", name)
		} else {
			if s.Build.Context != repoRoot {
				probs.addf("compose: %s build context is %s, want the repository root %s", name, s.Build.Context, repoRoot)
			}
			if s.Build.Dockerfile != "deploy/Dockerfile" {
				probs.addf("compose: %s builds %q, want deploy/Dockerfile", name, s.Build.Dockerfile)
			}
		}
		if image == "" {
			image = s.Image
		}
		if s.Image == "" || s.Image != image {
			probs.addf("compose: %s runs image %q, want the one seckill image %q", name, s.Image, image)
		}
		if !slices.Equal([]string(s.Command), []string{name}) {
			probs.addf("compose: %s command is %q, want [%s]", name, s.Command, name)
		}
		for _, key := range commonEnv {
			if v := s.Environment[key]; v == nil || *v == "" {
				probs.addf("compose: %s lacks %s", name, key)
			}
		}
		got := map[string]string{}
		for dep, d := range s.DependsOn {
			got[dep] = d.Condition
		}
		if !maps.Equal(got, wantDependsOn[name]) {
			probs.addf("compose: %s depends_on %v, want %v", name, got, wantDependsOn[name])
		}
	}
	if m, err := p.GetService("migrate"); err == nil && m.Restart != "no" {
		probs.addf("compose: migrate restart is %q, want \"no\" (a restarted one-shot never completes)", m.Restart)
	}

	for _, name := range roles {
		s, err := p.GetService(name)
		if err != nil {
			continue
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) != 30*time.Second {
			probs.addf("compose: %s stop_grace_period is not 30s", name)
		}
		addr := s.Environment[listenEnv[name]]
		if addr == nil {
			probs.addf("compose: %s lacks %s", name, listenEnv[name])
			continue
		}
		port, ok := listenPort(*addr)
		if !ok {
			probs.addf("compose: %s %s=%q has no port", name, listenEnv[name], *addr)
			continue
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) < 3 || s.HealthCheck.Test[1] != "/healthcheck" ||
			!strings.Contains(s.HealthCheck.Test[2], ":"+port+"/") {
			probs.addf("compose: %s healthcheck must run /healthcheck against port %s, got %v", name, port, healthTest(s))
		}
		if name == "api" {
			published := false
			for _, pc := range s.Ports {
				if pc.Published == port && pc.Target == parsePort(port) {
					published = true
				}
			}
			if !published {
				probs.addf("compose: api must publish %s:%s, got %+v", port, port, s.Ports)
			}
		}
	}

	// Anything waited on as healthy must have a healthcheck to become healthy.
	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition != types.ServiceConditionHealthy {
				continue
			}
			if ds, err := p.GetService(dep); err == nil && (ds.HealthCheck == nil || ds.HealthCheck.Disable) {
				probs.addf("compose: %s waits for %s to be healthy, but %s has no healthcheck", s.Name, dep, dep)
			}
		}
	}

	probs = append(probs, checkComposeInfra(p)...)
	return probs
}

// checkComposeInfra checks that the seckill services' URLs point at the
// infrastructure services as they are configured.
func checkComposeInfra(p *types.Project) problems {
	var probs problems
	api, err := p.GetService("api")
	if err != nil {
		return probs
	}
	env := func(s types.ServiceConfig, key string) string {
		if v := s.Environment[key]; v != nil {
			return *v
		}
		return ""
	}

	if u, err := url.Parse(env(api, "SECKILL_REDIS_URL")); err != nil || u.Hostname() != "redis" || u.Port() != "6379" {
		probs.addf("compose: SECKILL_REDIS_URL %q must point at redis:6379", env(api, "SECKILL_REDIS_URL"))
	}
	if redis, err := p.GetService("redis"); err == nil {
		cmd := strings.Join(redis.Command, " ")
		if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--appendfsync everysec") {
			probs.addf("compose: redis must run with --appendonly yes --appendfsync everysec, got %q", cmd)
		}
	}

	if pg, err := p.GetService("postgres"); err == nil {
		u, err := url.Parse(env(api, "SECKILL_POSTGRES_URL"))
		if err != nil {
			probs.addf("compose: SECKILL_POSTGRES_URL: %v", err)
		} else {
			pass, _ := u.User.Password()
			if u.Hostname() != "postgres" || u.Port() != "5432" || u.User.Username() != env(pg, "POSTGRES_USER") ||
				pass != env(pg, "POSTGRES_PASSWORD") || strings.TrimPrefix(u.Path, "/") != env(pg, "POSTGRES_DB") {
				probs.addf("compose: SECKILL_POSTGRES_URL %q does not match the postgres service's user, password and database", u.Redacted())
			}
		}
	}

	if kafka, err := p.GetService("kafka"); err == nil {
		if kafka.Image != "apache/kafka:3.9.1" {
			probs.addf("compose: kafka image is %q, want apache/kafka:3.9.1", kafka.Image)
		}
		for key, want := range map[string]string{
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
		} {
			if got := env(kafka, key); got != want {
				probs.addf("compose: kafka %s=%q, want %q", key, got, want)
			}
		}
		for _, key := range []string{"CLUSTER_ID", "KAFKA_NODE_ID", "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENERS", "KAFKA_CONTROLLER_LISTENER_NAMES"} {
			if env(kafka, key) == "" {
				probs.addf("compose: kafka lacks %s, which KRaft needs", key)
			}
		}
		advertised := map[string]bool{}
		for _, l := range strings.Split(env(kafka, "KAFKA_ADVERTISED_LISTENERS"), ",") {
			if _, hostport, ok := strings.Cut(l, "://"); ok {
				advertised[hostport] = true
			}
		}
		for _, b := range strings.Split(env(api, "SECKILL_KAFKA_BROKERS"), ",") {
			if !advertised[b] {
				probs.addf("compose: broker %q is not an advertised listener of kafka (%s)", b, env(kafka, "KAFKA_ADVERTISED_LISTENERS"))
			}
		}
		// The api creates topics with this replication; one broker holds one replica.
		if got := env(api, "SECKILL_REPLICATION"); got != "1" {
			probs.addf("compose: api SECKILL_REPLICATION=%q, want 1 for the single broker", got)
		}
	}
	return probs
}

func healthTest(s types.ServiceConfig) []string {
	if s.HealthCheck == nil {
		return nil
	}
	return s.HealthCheck.Test
}

// parsePort returns the number of a decimal port, 0 if it is not one.
func parsePort(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0
	}
	return uint32(n)
}

func TestCompose(t *testing.T) {
	p, err := loadCompose(t, readDeployFile(t, "compose.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkCompose(p, filepath.Dir(deployDir(t))).report(t)
}

func TestComposeImageFromEnvironment(t *testing.T) {
	p, err := loadCompose(t, readDeployFile(t, "compose.yaml"), map[string]string{"SECKILL_IMAGE": "registry.example.com/seckill:v1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"migrate"}, roles...) {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if s.Image != "registry.example.com/seckill:v1" {
			t.Errorf("%s image %q: SECKILL_IMAGE not honoured", name, s.Image)
		}
	}
}

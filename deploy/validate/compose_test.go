package validate

import (
	"context"
	"maps"
	"net/url"
	"path"
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

// listenEnv names the variable that sets the HTTP address a role serves on.
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
	"api":         withInfra(nil),
	"consumer":    withInfra(map[string]string{"api": types.ServiceConditionHealthy}),
	"compensator": withInfra(map[string]string{"api": types.ServiceConditionHealthy}),
}

// infra are the servers of the replicated topology; a role waits for all of them, and for
// one sentinel (it asks the sentinels which Redis is the primary).
var infra = []string{"kafka", "kafka-2", "kafka-3", "redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "postgres"}

// composeScale is how many of each seckill service compose.yaml runs at most: its header
// suggests --scale consumer=3 and --scale compensator=2, and migrate may be run again.
var composeScale = map[string]int{"api": 1, "consumer": 3, "compensator": 2, "migrate": 1}

// brokers are the Kafka services, redisNodes the Redis data servers.
var (
	brokers    = []string{"kafka", "kafka-2", "kafka-3"}
	redisNodes = []string{"redis", "redis-replica"}
)

func withInfra(more map[string]string) map[string]string {
	m := map[string]string{
		"kafka":      types.ServiceConditionHealthy,
		"kafka-2":    types.ServiceConditionHealthy,
		"kafka-3":    types.ServiceConditionHealthy,
		"sentinel-1": types.ServiceConditionHealthy,
		"postgres":   types.ServiceConditionHealthy,
		"migrate":    types.ServiceConditionCompletedSuccessfully,
	}
	maps.Copy(m, more)
	return m
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

	want := slices.Concat(infra, []string{"migrate"}, roles)
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
		// As checkMemLimit in k8s/: GOMEMLIMIT 75-95% of the memory limit, so the garbage
		// collector, at GOGC=400, works harder before the kernel's OOM killer acts.
		if v := s.Environment["GOMEMLIMIT"]; v == nil || s.MemLimit <= 0 {
			probs.addf("compose: %s wants mem_limit and GOMEMLIMIT", name)
		} else if n, err := goMemLimit(*v); err != nil || n < int64(s.MemLimit)*75/100 || n > int64(s.MemLimit)*95/100 {
			probs.addf("compose: %s GOMEMLIMIT %q is not 75-95%% of mem_limit (%d bytes)", name, *v, s.MemLimit)
		}
		// As the k8s securityContext: seckill writes no file and needs no capability.
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.ContainsFunc(s.SecurityOpt, func(o string) bool {
			return o == "no-new-privileges" || o == "no-new-privileges:true"
		}) {
			probs.addf("compose: %s wants read_only: true, cap_drop: [ALL] and security_opt: [no-new-privileges:true], as its k8s securityContext (got read_only %t, cap_drop %v, security_opt %v)", name, s.ReadOnly, s.CapDrop, s.SecurityOpt)
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
		// As terminationGracePeriodSeconds in k8s/: the api drains for longer.
		if want := time.Duration(terminationGrace[name]) * time.Second; s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) != want {
			probs.addf("compose: %s stop_grace_period is not %s", name, want)
		}
		public := ""
		if a := s.Environment[listenEnv[name]]; a == nil {
			probs.addf("compose: %s lacks %s", name, listenEnv[name])
		} else {
			public, _ = listenPort(*a)
		}
		// The healthcheck reaches the ops port, as the k8s probes do (probeEnv).
		addr := s.Environment[probeEnv[name]]
		if addr == nil {
			probs.addf("compose: %s lacks %s", name, probeEnv[name])
			continue
		}
		port, ok := listenPort(*addr)
		if !ok {
			probs.addf("compose: %s %s=%q has no port", name, probeEnv[name], *addr)
			continue
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) < 3 || s.HealthCheck.Test[1] != "/healthcheck" ||
			!strings.Contains(s.HealthCheck.Test[2], ":"+port+"/") {
			probs.addf("compose: %s healthcheck must run /healthcheck against port %s, got %v", name, port, healthTest(s))
		}
		if name == "api" {
			env := func(key string) (string, bool) {
				if v := s.Environment[key]; v != nil {
					return *v, true
				}
				return "", false
			}
			maxConns, set := env("SECKILL_MAX_CONNS")
			memLimit, _ := env("GOMEMLIMIT")
			probs = append(probs, checkConnMemory("compose: api", maxConns, set, memLimit)...)
			for _, key := range apiSecrets {
				if v := s.Environment[key]; v == nil || len(*v) < minSecretLen {
					probs.addf("compose: api lacks %s of at least %d bytes", key, minSecretLen)
				}
			}
			published := false
			for _, pc := range s.Ports {
				if pc.Published == public && pc.Target == parsePort(public) {
					published = true
				}
			}
			if !published {
				probs.addf("compose: api must publish %s:%s, got %+v", public, public, s.Ports)
			}
			// The admin and payment tokens and the JWT secret default to values public in this
			// repository: published on every interface (Docker's default, past the host's
			// firewall), anyone on the network could mint buyers' tokens and run the admin
			// endpoints of a developer's stack.
			for _, pc := range s.Ports {
				if pc.HostIP != "127.0.0.1" {
					probs.addf("compose: api publishes %s on %q, want 127.0.0.1: its secrets default to values public in this repository", pc.Published, pc.HostIP)
				}
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

	for _, s := range p.Services {
		if s.HealthCheck != nil && pgIsReadyOverSocket(s.HealthCheck.Test) {
			probs.addf("compose: %s healthcheck runs pg_isready without -h 127.0.0.1: on a fresh volume it finds the entrypoint's socket-only server ready before PostgreSQL listens on TCP, and migrate, started then, fails", s.Name)
		}
	}

	probs = append(probs, checkComposeInfra(p)...)
	return probs
}

// pgIsReadyOverSocket reports whether cmd runs pg_isready without a TCP host. On a fresh
// volume the postgres image's entrypoint creates the database on a temporary server that
// listens on its Unix socket only (listen_addresses=”); pg_isready without -h asks that
// socket and answers ready, and whatever starts then (compose's migrate, which does not
// retry; a Service's clients) finds nothing on port 5432 until the real server is up
// (docker-library/postgres#880).
func pgIsReadyOverSocket(cmd []string) bool {
	f := strings.Fields(strings.Join(cmd, " "))
	i := slices.IndexFunc(f, func(a string) bool { return path.Base(a) == "pg_isready" })
	if i < 0 {
		return false
	}
	for j := i + 1; j < len(f); j++ {
		var host string
		switch a := f[j]; {
		case (a == "-h" || a == "--host") && j+1 < len(f):
			host = f[j+1]
		case strings.HasPrefix(a, "--host="):
			host = strings.TrimPrefix(a, "--host=")
		case strings.HasPrefix(a, "-h") && len(a) > 2:
			host = a[2:]
		}
		if host != "" && !strings.HasPrefix(host, "/") {
			return false
		}
	}
	return true
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

	// The roles reach Redis through the sentinels, which must watch the primary by the name
	// the URL gives.
	redisURL := env(api, "SECKILL_REDIS_URL")
	if u, err := url.Parse(redisURL); err != nil || u.Scheme != "redis+sentinel" || u.Host != "sentinel-1:26379,sentinel-2:26379,sentinel-3:26379" ||
		!strings.HasPrefix(u.Path, "/seckill/") {
		probs.addf("compose: SECKILL_REDIS_URL %q must name the three sentinels and the master seckill", redisURL)
	}
	for _, name := range []string{"sentinel-1", "sentinel-2", "sentinel-3"} {
		if s, err := p.GetService(name); err == nil && !strings.Contains(strings.Join(s.Command, " "), "sentinel monitor seckill redis 6379 2") {
			probs.addf("compose: %s must monitor the primary redis:6379 as seckill with a quorum of 2", name)
		}
	}
	for _, name := range redisNodes {
		if redis, err := p.GetService(name); err == nil {
			cmd := strings.Join(redis.Command, " ")
			if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--appendfsync everysec") {
				probs.addf("compose: %s must run with --appendonly yes --appendfsync everysec, got %q", name, cmd)
			}
		}
	}
	if r, err := p.GetService("redis-replica"); err == nil && !strings.Contains(strings.Join(r.Command, " "), "--replicaof redis 6379") {
		probs.addf("compose: redis-replica must replicate redis:6379")
	}

	if pg, err := p.GetService("postgres"); err == nil {
		probs = append(probs, checkPGConns("compose: postgres", composeScale, pg.Command)...)
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

	advertised := map[string]bool{}
	var voters string
	for i, name := range brokers {
		kafka, err := p.GetService(name)
		if err != nil {
			continue
		}
		if kafka.Image != "apache/kafka:3.9.1" {
			probs.addf("compose: %s image is %q, want apache/kafka:3.9.1", name, kafka.Image)
		}
		for key, want := range map[string]string{
			"KAFKA_NODE_ID":                                  strconv.Itoa(i + 1),
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "3",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "2",
			"KAFKA_MIN_INSYNC_REPLICAS":                      "2",
			"KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE":           "false",
		} {
			if got := env(kafka, key); got != want {
				probs.addf("compose: %s %s=%q, want %q", name, key, got, want)
			}
		}
		for _, key := range []string{"CLUSTER_ID", "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENERS", "KAFKA_CONTROLLER_LISTENER_NAMES"} {
			if env(kafka, key) == "" {
				probs.addf("compose: %s lacks %s, which KRaft needs", name, key)
			}
		}
		if voters == "" {
			voters = env(kafka, "KAFKA_CONTROLLER_QUORUM_VOTERS")
		} else if env(kafka, "KAFKA_CONTROLLER_QUORUM_VOTERS") != voters {
			probs.addf("compose: %s has other controller voters than kafka", name)
		}
		for _, l := range strings.Split(env(kafka, "KAFKA_ADVERTISED_LISTENERS"), ",") {
			if _, hostport, ok := strings.Cut(l, "://"); ok {
				advertised[hostport] = true
			}
		}
	}
	seeds := strings.Split(env(api, "SECKILL_KAFKA_BROKERS"), ",")
	for _, b := range seeds {
		if !advertised[b] {
			probs.addf("compose: broker %q is not an advertised listener of a kafka service", b)
		}
	}
	if len(seeds) != len(brokers) {
		probs.addf("compose: SECKILL_KAFKA_BROKERS names %d brokers, want all %d", len(seeds), len(brokers))
	}
	// The api creates topics with this replication: one replica per broker.
	if got := env(api, "SECKILL_REPLICATION"); got != strconv.Itoa(len(brokers)) {
		probs.addf("compose: api SECKILL_REPLICATION=%q, want %d, one replica per broker", got, len(brokers))
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

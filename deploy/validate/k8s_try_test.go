package validate

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// deploy/k8s-try applies the roles of deploy/k8s with the single-node servers of
// deploy/k8s/infra, changing only what those servers need. It lives beside deploy/k8s:
// kustomize refuses a base that contains its overlay.

// tryKustomization is the part of a Kustomization the overlay uses, decoded strictly.
type tryKustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Patch string `json:"patch"`
	} `json:"patches"`
}

// checkTryOverlay checks the overlay against the bundles of deploy/k8s: it takes both,
// and its one patch sets the topics' replication to the brokers infra/ runs.
func checkTryOverlay(data []byte, bundles []*bundle) problems {
	var probs problems
	const file = "k8s-try/kustomization.yaml"
	var k tryKustomization
	if err := decodeStrict(data, &k); err != nil {
		probs.addf("%s: %v", file, err)
		return probs
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		probs.addf("%s: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", file, k.APIVersion, k.Kind)
	}
	if !slices.Equal(k.Resources, []string{"../k8s", "../k8s/infra"}) {
		probs.addf("%s: resources %v, want [../k8s ../k8s/infra]", file, k.Resources)
	}
	app, infra := appAndInfra(bundles)
	if app == nil || infra == nil {
		probs.addf("%s: deploy/k8s or deploy/k8s/infra has no kustomization", file)
		return probs
	}
	brokers := 0
	if sts, _ := infra.get("apps/v1/StatefulSet", "kafka").(*appsv1.StatefulSet); sts != nil && sts.Spec.Replicas != nil {
		brokers = int(*sts.Spec.Replicas)
	}
	if brokers == 0 {
		probs.addf("infra: no StatefulSet kafka with replicas")
	}
	var cm *corev1.ConfigMap
	var secret *corev1.Secret
	for i, p := range k.Patches {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(p.Patch), &tm); err != nil {
			probs.addf("%s: patch %d: %v", file, i+1, err)
			continue
		}
		var target object
		switch {
		case tm.APIVersion == "v1" && tm.Kind == "ConfigMap" && cm == nil:
			cm = new(corev1.ConfigMap)
			target = cm
		case tm.APIVersion == "v1" && tm.Kind == "Secret" && secret == nil:
			secret = new(corev1.Secret)
			target = secret
		default:
			probs.addf("%s: patch %d is of %s %s: want one of the ConfigMap (SECKILL_REPLICATION) and one of the Secret (SECKILL_POSTGRES_URL)", file, i+1, tm.APIVersion, tm.Kind)
			continue
		}
		if err := decodeStrict([]byte(p.Patch), target); err != nil {
			probs.addf("%s: patch %d: %v", file, i+1, err)
		}
	}
	if secret == nil {
		probs.addf("%s: no patch of the Secret: the roles would ask infra/'s PostgreSQL, which has no TLS, for secret.yaml's sslmode=%s", file, queryOf(mustConfig(app, "SECKILL_POSTGRES_URL"), "sslmode"))
	} else {
		probs = append(probs, checkTryPostgres(file, secret, app, infra)...)
	}
	if cm == nil {
		probs.addf("%s: no patch of the ConfigMap: SECKILL_REPLICATION must be infra/'s %d broker(s)", file, brokers)
		cm = new(corev1.ConfigMap)
	}
	if app.get("v1/ConfigMap", cm.Name) == nil {
		probs.addf("%s: the patch must be of a ConfigMap of deploy/k8s, not %s %s %s", file, cm.APIVersion, cm.Kind, cm.Name)
	}
	for key := range cm.Data {
		if key != "SECKILL_REPLICATION" {
			probs.addf("%s: the patch sets %s: it changes only what infra/ needs", file, key)
		}
	}
	if got := cm.Data["SECKILL_REPLICATION"]; got != strconv.Itoa(brokers) {
		probs.addf("%s: SECKILL_REPLICATION=%q, but infra/ runs %d Kafka broker(s): the api would retry topic creation forever", file, got, brokers)
	}
	// deploy/k8s itself is for production Kafka: one replica per broker of three.
	if v, _ := configValue(app, "SECKILL_REPLICATION"); v != "3" {
		probs.addf("configmap.yaml: SECKILL_REPLICATION=%q, want \"3\" (three brokers or more in production)", v)
	}
	return probs
}

// checkTryPostgres checks the overlay's patch of the Secret: SECKILL_POSTGRES_URL alone, the
// production URL of deploy/k8s but for sslmode=disable, which infra/'s PostgreSQL needs (it
// has no TLS: lib/pq's verify-full or require fail, and the roles stop on it), and which
// reaches that server with its credentials.
func checkTryPostgres(file string, patch *corev1.Secret, app, infra *bundle) problems {
	var probs problems
	base, _ := app.get("v1/Secret", patch.Name).(*corev1.Secret)
	if base == nil {
		probs.addf("%s: the patch must be of a Secret of deploy/k8s, not %s", file, patch.Name)
		return probs
	}
	data := secretData(patch)
	for key := range data {
		if key != "SECKILL_POSTGRES_URL" {
			probs.addf("%s: the Secret patch sets %s: it changes only what infra/ needs", file, key)
		}
	}
	v, ok := data["SECKILL_POSTGRES_URL"]
	if !ok {
		probs.addf("%s: the Secret patch does not set SECKILL_POSTGRES_URL: the roles would ask infra/'s PostgreSQL, which has no TLS, for %s", file, "sslmode="+queryOf(secretData(base)["SECKILL_POSTGRES_URL"], "sslmode"))
		return probs
	}
	u, err := url.Parse(v)
	if err != nil {
		probs.addf("%s: SECKILL_POSTGRES_URL: %v", file, err)
		return probs
	}
	if mode := u.Query().Get("sslmode"); mode != "disable" {
		probs.addf("%s: SECKILL_POSTGRES_URL has sslmode=%q, want disable: infra/'s PostgreSQL has no TLS", file, mode)
	}
	// The rest is the production URL's: only sslmode differs.
	if want, err := url.Parse(secretData(base)["SECKILL_POSTGRES_URL"]); err == nil {
		got := *u
		q, wq := got.Query(), want.Query()
		q.Del("sslmode")
		wq.Del("sslmode")
		got.RawQuery, want.RawQuery = q.Encode(), wq.Encode()
		if got.String() != want.String() {
			probs.addf("%s: SECKILL_POSTGRES_URL differs from secret.yaml's in more than sslmode", file)
		}
	}
	probs = append(probs, checkInfraPostgres(app, infra, file+"'s SECKILL_POSTGRES_URL", u)...)
	return probs
}

// mustConfig returns the value of key in a ConfigMap or Secret of b, "" without one.
func mustConfig(b *bundle, key string) string {
	v, _ := configValue(b, key)
	return v
}

// queryOf returns a URL's query parameter, "" when it has none or is no URL.
func queryOf(v, key string) string {
	u, err := url.Parse(v)
	if err != nil {
		return ""
	}
	return u.Query().Get(key)
}

func TestK8sTryOverlay(t *testing.T) {
	bundles, _, err := loadBundles(os.DirFS(k8sDir(t)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(deployDir(t), "k8s-try", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkTryOverlay(data, bundles).report(t)
}

func TestK8sTryOverlayRejects(t *testing.T) {
	bundles, _, err := loadBundles(os.DirFS(k8sDir(t)))
	if err != nil {
		t.Fatal(err)
	}
	real := string(readDeployFile(t, "k8s-try/kustomization.yaml"))
	for _, tc := range []struct{ name, old, new, want string }{
		{"replication above the brokers", `SECKILL_REPLICATION: "1"`, `SECKILL_REPLICATION: "3"`, `SECKILL_REPLICATION="3", but infra/ runs 1 Kafka broker(s)`},
		{"infra left out", "  - ../k8s/infra\n", "", "want [../k8s ../k8s/infra]"},
		{"patch of another ConfigMap", "name: seckill-config", "name: seckill-conf", "must be of a ConfigMap of deploy/k8s"},
		{"patch changes more", `        SECKILL_REPLICATION: "1"`, "        SECKILL_REPLICATION: \"1\"\n        SECKILL_PARTITIONS: \"3\"", "the patch sets SECKILL_PARTITIONS"},
		{"misspelt field", "patches:", "patchez:", `unknown field "patchez"`},
		{"infra PostgreSQL asked for TLS", "seckill?sslmode=disable", "seckill?sslmode=verify-full", `SECKILL_POSTGRES_URL has sslmode="verify-full", want disable: infra/'s PostgreSQL has no TLS`},
		{"no Secret patch", "  - patch: |-\n      apiVersion: v1\n      kind: Secret\n", "  - patch: |-\n      apiVersion: v1\n      kind: Namespace\n", "no patch of the Secret: the roles would ask infra/'s PostgreSQL, which has no TLS, for secret.yaml's sslmode=verify-full"},
		{"overlay URL drifts from production's", "postgres://seckill:REPLACE_ME@postgres:5432/seckill?sslmode=disable", "postgres://seckill:REPLACE_ME@postgres:5432/orders?sslmode=disable", "differs from secret.yaml's in more than sslmode"},
		{"overlay password is not infra's", "postgres://seckill:REPLACE_ME@postgres", "postgres://seckill:REPLACE_ME-too@postgres", "k8s-try/kustomization.yaml's SECKILL_POSTGRES_URL's password does not match infra/ postgres POSTGRES_PASSWORD"},
		{"Secret patch changes more", "        SECKILL_POSTGRES_URL: postgres://", "        SECKILL_ADMIN_TOKEN: x\n        SECKILL_POSTGRES_URL: postgres://", "the Secret patch sets SECKILL_ADMIN_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectProblem(t, checkTryOverlay([]byte(mustReplace(t, real, tc.old, tc.new)), bundles), tc.want)
		})
	}
}

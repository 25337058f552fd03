package validate

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	if len(k.Patches) != 1 {
		probs.addf("%s: want one patch (SECKILL_REPLICATION), found %d", file, len(k.Patches))
		return probs
	}
	var cm corev1.ConfigMap
	if err := decodeStrict([]byte(k.Patches[0].Patch), &cm); err != nil {
		probs.addf("%s: the patch: %v", file, err)
		return probs
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" || app.get("v1/ConfigMap", cm.Name) == nil {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectProblem(t, checkTryOverlay([]byte(mustReplace(t, real, tc.old, tc.new)), bundles), tc.want)
		})
	}
}

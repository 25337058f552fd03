package validate

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// seckillImage is the image name the manifests use for every role; the
// kustomization's images entry points it at a registry and tag.
const seckillImage = "seckill"

// placeholder marks every committed secret value: real ones never live here.
const placeholder = "REPLACE_ME"

// minSecretLen is the shortest token or key the api accepts (api.MinSecretLen). A
// placeholder shorter than that makes an api started with it refuse to start, where a
// longer one would be a working secret that everyone can read in the repository.
const minSecretLen = 32

// terminationGrace is each Deployment role's terminationGracePeriodSeconds. The api's
// covers its preStop pause, SECKILL_DRAIN_DELAY (5 s), the drain of requests in flight
// (at most 15 s) and the producer's flush of queued orders (at most 10 s).
var terminationGrace = map[string]int64{"api": 40, "consumer": 30, "compensator": 30}

// apiStopSeconds is what the api spends after SIGTERM besides its drain delay: the shutdown
// of the requests in flight (api.Config.ShutdownTimeout, 15 s) and the producer's flush
// (events.FlushAndClose, 10 s).
const apiStopSeconds = 15 + 10

// defaultDrainDelay is the api's --drain-delay (SECKILL_DRAIN_DELAY) when it is not set
// (roles.go runAPI).
const defaultDrainDelay = 5 * time.Second

// minReplicas is the fewest pods of each Deployment role: the api serves from three;
// two consumers share the partitions; two compensators, one sweeping under the lease
// and a standby that takes it over when the holder dies (I5 through a node's death).
var minReplicas = map[string]int32{"api": 3, "consumer": 2, "compensator": 2}

// startupBudget is the least time a role's startup probe allows before the liveness
// probe takes over. A role binds its ports at start and its ops port answers /healthz
// while it waits out a dependency that is down (roles.go startOps), so this bounds only
// a process that answers nothing: slow to start, not waiting.
const startupBudget = 300 // seconds

// probeEnv names the variable that sets the address a role's Kubernetes probes reach: the
// ops port (--metrics-addr) of every role. Not the api's public port: its listener closes a
// connection past SECKILL_MAX_CONNS as it is accepted, the kubelet's too, so under a flood
// of connections every api would fail its probes at once (api/conns.go, api/server.go Serve).
var probeEnv = map[string]string{
	"api":         "SECKILL_METRICS_ADDR",
	"consumer":    "SECKILL_METRICS_ADDR",
	"compensator": "SECKILL_METRICS_ADDR",
}

// readyzSeconds is how long a role's /readyz may take: it gives its dependencies 2 seconds
// (api/server.go readyTimeout, roles.go runWithOps), so one that hangs rather than refuses
// holds the answer that long.
const readyzSeconds = 2

// apiSecrets are the api's keys that every api of a deployment must share, each read from
// a Secret. SECKILL_ORDER_ID_SECRET defaults to one derived from SECKILL_JWT_SECRET, so
// without it a rotation of the JWT secret also changes the order id (and the Redis
// idempotency record) of every Idempotency-Key: during the rolling update apis disagree,
// and after it a buyer's retry of the last --idempotency-ttl reserves anew.
// SECKILL_PAYMENT_TOKEN is the payment service's own token, which may record payments and
// nothing else: without it that service would have to be given the admin token.
var apiSecrets = []string{"SECKILL_ADMIN_TOKEN", "SECKILL_PAYMENT_TOKEN", "SECKILL_JWT_SECRET", "SECKILL_ORDER_ID_SECRET"}

// credentialURLs are the variables whose URL carries a server's password: PostgreSQL's, and
// Redis's (AUTH or an ACL user, as every managed Redis asks; the Sentinels' in the query).
// seckill reads no password of either from anywhere else, so each URL comes from a Secret.
var credentialURLs = []string{"SECKILL_POSTGRES_URL", "SECKILL_REDIS_URL"}

// migrateEnv is what `seckill migrate` reads (roles.go runMigrate: f.conn(usesStore)): the
// order database and nothing else.
var migrateEnv = []string{"SECKILL_POSTGRES_URL"}

// roleKinds is the workload kind of each seckill process in deploy/k8s.
var roleKinds = map[string]string{
	"api":         "apps/v1/Deployment",
	"consumer":    "apps/v1/Deployment",
	"compensator": "apps/v1/Deployment",
	"migrate":     "batch/v1/Job",
}

// checkK8s checks every bundle on its own, then the roles in the top one and how
// it fits the infra/ starting point.
func checkK8s(bundles []*bundle) problems {
	var probs problems
	for _, b := range bundles {
		probs = append(probs, checkBundle(b)...)
	}
	app, infra := appAndInfra(bundles)
	if app == nil || infra == nil {
		probs.addf("k8s: want kustomization.yaml in deploy/k8s and deploy/k8s/infra")
		return probs
	}
	probs = append(probs, checkRoles(app)...)
	probs = append(probs, checkInfra(app, infra)...)
	probs = append(probs, checkNetworkPolicies(app, infra)...)
	return probs
}

// checkBundle checks what every set of manifests must get right: namespaces,
// unique names, selectors that select, ports and probes that point at declared
// ports, references to ConfigMap and Secret keys that exist, and pods that pass
// the restricted Pod Security Standard.
func checkBundle(b *bundle) problems {
	var probs problems
	kfile := path.Join(b.dir, "kustomization.yaml")
	if b.kust.Namespace == "" {
		probs.addf("%s: no namespace", kfile)
	}

	seen := map[string]bool{}
	used := map[string]bool{} // "ConfigMap/name/key" or "Secret/name/key"
	for _, m := range b.objs {
		key := m.kind + " " + m.obj.GetName()
		if seen[key] {
			probs.addf("%s: %s defined twice", m.file, key)
		}
		seen[key] = true
		if ns := m.obj.GetNamespace(); ns != "" && ns != b.kust.Namespace {
			probs.addf("%s: namespace %s, but %s sets %s", m, ns, kfile, b.kust.Namespace)
		}
		if ns, ok := m.obj.(*corev1.Namespace); ok && ns.Name != b.kust.Namespace {
			probs.addf("%s: Namespace %s is not the kustomization's namespace %s", m.file, ns.Name, b.kust.Namespace)
		}

		tmpl := podTemplate(m.obj)
		if tmpl == nil {
			continue
		}
		probs = append(probs, checkPod(m, tmpl, b, used)...)
		var sel *metav1.LabelSelector
		switch w := m.obj.(type) {
		case *appsv1.Deployment:
			sel = w.Spec.Selector
		case *appsv1.StatefulSet:
			sel = w.Spec.Selector
			probs = append(probs, checkGoverningService(m, w, b)...)
		}
		if _, isJob := m.obj.(*batchv1.Job); !isJob {
			if ok, err := selects(sel, tmpl.Labels); err != nil || !ok {
				probs.addf("%s: selector %s does not match the template labels %v (%v)", m, metav1.FormatLabelSelector(sel), tmpl.Labels, err)
			}
		}
	}

	for _, m := range b.find("v1/Service") {
		probs = append(probs, checkService(m, b)...)
	}
	for _, m := range b.find("policy/v1/PodDisruptionBudget") {
		pdb := m.obj.(*policyv1.PodDisruptionBudget)
		if len(selectedWorkloads(b, pdb.Spec.Selector)) == 0 {
			probs.addf("%s: selector %s selects no Deployment or StatefulSet", m, metav1.FormatLabelSelector(pdb.Spec.Selector))
		}
		// Every role's readiness depends on Redis and Kafka (the consumer's and the
		// compensator's on PostgreSQL too), so an outage of one leaves all pods unready. The default policy (IfHealthyBudget) evicts an unready pod
		// only while the budget holds, which it then never does: a drain waits forever on pods
		// that serve nothing.
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			probs.addf("%s: unhealthyPodEvictionPolicy must be AlwaysAllow: when a dependency is down every pod is unready, and with the default (IfHealthyBudget) a node drain hangs on them", m)
		}
	}

	// Every key is read by someone: dead configuration misleads whoever edits it.
	for _, m := range b.find("v1/ConfigMap") {
		for key, v := range m.obj.(*corev1.ConfigMap).Data {
			if !used["ConfigMap/"+m.obj.GetName()+"/"+key] {
				probs.addf("%s: key %s is read by no container", m, key)
			}
			// A ConfigMap is readable by whoever may read the namespace's configuration, is
			// printed by kubectl describe, and is not encrypted at rest as Secrets can be.
			if urlHasPassword(v) {
				probs.addf("%s: %s is a URL with a password: credentials go in a Secret", m, key)
			}
		}
	}
	for _, m := range b.find("v1/Secret") {
		for key, v := range secretData(m.obj.(*corev1.Secret)) {
			if !used["Secret/"+m.obj.GetName()+"/"+key] {
				probs.addf("%s: key %s is read by no container", m, key)
			}
			// No placeholder is a usable secret: one left in must make the api refuse to
			// start. (A URL's placeholder is its password, which has no length rule.)
			if strings.Contains(v, placeholder) && !strings.Contains(v, "://") && len(v) >= minSecretLen {
				probs.addf("%s: the placeholder of %s is %d bytes, a usable secret if nobody replaces it: keep it under %d bytes (%s)", m, key, len(v), minSecretLen, placeholder)
			}
		}
	}
	return probs
}

// checkPod checks one pod template, and records in used the ConfigMap and Secret
// keys its containers read.
func checkPod(m manifest, tmpl *corev1.PodTemplateSpec, b *bundle, used map[string]bool) problems {
	var probs problems
	spec := tmpl.Spec
	_, isJob := m.obj.(*batchv1.Job)
	podSC := spec.SecurityContext
	if podSC == nil {
		podSC = &corev1.PodSecurityContext{}
	}
	if len(spec.Containers) == 0 {
		probs.addf("%s: no containers", m)
	}
	// No pod here calls the Kubernetes API. Mounted (the default), the service account's
	// token is one file read away from whoever gets code to run in the pod.
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		probs.addf("%s: automountServiceAccountToken is not false: no pod here talks to the Kubernetes API, so none needs the token", m)
	}

	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		where := fmt.Sprintf("%s container %s", m, c.Name)
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}

		// The restricted Pod Security Standard, which namespace.yaml enforces.
		if !isTrue(sc.RunAsNonRoot) && !isTrue(podSC.RunAsNonRoot) {
			probs.addf("%s: runAsNonRoot is not true", where)
		}
		if seccompType(sc.SeccompProfile, podSC.SeccompProfile) != corev1.SeccompProfileTypeRuntimeDefault {
			probs.addf("%s: seccompProfile is not RuntimeDefault", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			probs.addf("%s: allowPrivilegeEscalation is not false", where)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			probs.addf("%s: capabilities do not drop ALL", where)
		}

		if c.Image == "" {
			probs.addf("%s: no image", where)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				probs.addf("%s: no %s request", where, r)
			}
		}
		if limit, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			probs.addf("%s: no memory limit", where)
		} else if imageName(c.Image) == seckillImage {
			// Jobs too: every seckill command runs at GOGC=400 (main.go), a Job's as well.
			probs = append(probs, checkMemLimit(where, c, limit.Value())...)
		}

		if !isJob && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
			probs.addf("%s: a long-running container needs a readiness and a liveness probe", where)
		}
		// A liveness probe that runs from the start kills a first start that takes longer than
		// it allows: PostgreSQL's, whose entrypoint creates the database on a server without
		// TCP, restarted in the middle of initdb, comes back to a half-made data directory it
		// takes for a made one.
		if c.LivenessProbe != nil && c.StartupProbe == nil {
			probs.addf("%s: a liveness probe without a startup probe: a slow first start is killed in a loop", where)
		}
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if p == nil {
				continue
			}
			if p.Exec != nil && pgIsReadyOverSocket(p.Exec.Command) {
				probs.addf("%s: %s probe runs pg_isready without -h 127.0.0.1: on a fresh volume it finds the entrypoint's socket-only server ready before PostgreSQL listens on TCP", where, name)
			}
			if port, ok := probePort(p); ok {
				if _, found := resolvePort(c, port); !found {
					probs.addf("%s: %s probe port %s is not a declared container port", where, name, port.String())
				}
			} else if p.Exec == nil {
				probs.addf("%s: %s probe has no handler", where, name)
			}
		}

		names := map[string]bool{}
		for _, e := range c.Env {
			if names[e.Name] {
				probs.addf("%s: env %s set twice", where, e.Name)
			}
			names[e.Name] = true
			if e.ValueFrom == nil {
				continue
			}
			if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
				used["ConfigMap/"+ref.Name+"/"+ref.Key] = true
				cm, _ := b.get("v1/ConfigMap", ref.Name).(*corev1.ConfigMap)
				if cm == nil {
					probs.addf("%s: env %s reads ConfigMap %s, which is not in %s", where, e.Name, ref.Name, b.dir)
				} else if _, ok := cm.Data[ref.Key]; !ok && !isTrue(ref.Optional) {
					probs.addf("%s: env %s reads key %s, which ConfigMap %s lacks", where, e.Name, ref.Key, ref.Name)
				}
			}
			if ref := e.ValueFrom.SecretKeyRef; ref != nil {
				used["Secret/"+ref.Name+"/"+ref.Key] = true
				s, _ := b.get("v1/Secret", ref.Name).(*corev1.Secret)
				if s == nil {
					probs.addf("%s: env %s reads Secret %s, which is not in %s", where, e.Name, ref.Name, b.dir)
				} else if _, ok := secretData(s)[ref.Key]; !ok && !isTrue(ref.Optional) {
					probs.addf("%s: env %s reads key %s, which Secret %s lacks", where, e.Name, ref.Key, ref.Name)
				}
			}
		}
		for _, ef := range c.EnvFrom {
			if ref := ef.ConfigMapRef; ref != nil {
				cm, _ := b.get("v1/ConfigMap", ref.Name).(*corev1.ConfigMap)
				if cm == nil {
					probs.addf("%s: envFrom ConfigMap %s is not in %s", where, ref.Name, b.dir)
					continue
				}
				for key := range cm.Data {
					used["ConfigMap/"+ref.Name+"/"+key] = true
				}
			}
			if ref := ef.SecretRef; ref != nil {
				s, _ := b.get("v1/Secret", ref.Name).(*corev1.Secret)
				if s == nil {
					probs.addf("%s: envFrom Secret %s is not in %s", where, ref.Name, b.dir)
					continue
				}
				for key := range secretData(s) {
					used["Secret/"+ref.Name+"/"+key] = true
				}
			}
		}
	}
	return probs
}

// checkService checks that a Service selects pods and that each of its target
// ports is a port of every pod it selects.
// checkMemLimit: a long-running seckill container sets GOMEMLIMIT to 75–95% of its memory limit, so
// the garbage collector works harder before the kernel's OOM killer would act.
func checkMemLimit(where string, c corev1.Container, limit int64) problems {
	var probs problems
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		n, err := goMemLimit(e.Value)
		if err != nil {
			probs.addf("%s: GOMEMLIMIT %q: %v", where, e.Value, err)
		} else if n < limit*75/100 || n > limit*95/100 {
			probs.addf("%s: GOMEMLIMIT %q is not 75-95%% of the memory limit (%d bytes)", where, e.Value, limit)
		}
		return probs
	}
	probs.addf("%s: no GOMEMLIMIT beside its memory limit", where)
	return probs
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: bytes, with an optional B, KiB,
// MiB, GiB or TiB suffix.
func goMemLimit(v string) (int64, error) {
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if num, ok := strings.CutSuffix(v, unit); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			return n << (10 * (4 - i)), err
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

func checkService(m manifest, b *bundle) problems {
	var probs problems
	svc := m.obj.(*corev1.Service)
	if len(svc.Spec.Selector) == 0 {
		probs.addf("%s: no selector", m)
		return probs
	}
	targets := selectedWorkloads(b, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	if len(targets) == 0 {
		probs.addf("%s: selector %v selects no workload", m, svc.Spec.Selector)
	}
	for _, sp := range svc.Spec.Ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port)
		}
		for _, w := range targets {
			found := false
			for _, c := range podTemplate(w.obj).Spec.Containers {
				if _, ok := resolvePort(c, target); ok {
					found = true
				}
			}
			if !found {
				probs.addf("%s: port %s targets %s, which %s does not declare", m, sp.Name, target.String(), w)
			}
		}
	}
	return probs
}

// checkGoverningService checks that a StatefulSet's serviceName is a headless
// Service selecting its pods.
func checkGoverningService(m manifest, sts *appsv1.StatefulSet, b *bundle) problems {
	var probs problems
	svc, _ := b.get("v1/Service", sts.Spec.ServiceName).(*corev1.Service)
	switch {
	case svc == nil:
		probs.addf("%s: serviceName %q is not a Service in %s", m, sts.Spec.ServiceName, b.dir)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		probs.addf("%s: Service %s must be headless (clusterIP: None)", m, svc.Name)
	default:
		if ok, _ := selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, sts.Spec.Template.Labels); !ok {
			probs.addf("%s: Service %s does not select its pods", m, svc.Name)
		}
	}
	return probs
}

// checkRoles checks the seckill processes: one image, the role as argument, the
// common configuration, probes on the ops port the process listens on, the drain
// time, and the api's replicas, Service and PodDisruptionBudget.
func checkRoles(b *bundle) problems {
	var probs problems
	if !slices.ContainsFunc(b.kust.Images, func(i kustomizeImage) bool { return i.Name == seckillImage }) {
		probs.addf("kustomization.yaml: no images entry for %s, so the registry and tag cannot be set in one place", seckillImage)
	}
	for _, m := range b.find("v1/Secret") {
		for key, v := range secretData(m.obj.(*corev1.Secret)) {
			if !strings.Contains(v, placeholder) {
				probs.addf("%s: %s is not a %s placeholder: real secrets do not belong in the repository", m, key, placeholder)
			}
		}
	}

	for role, kind := range roleKinds {
		var found []manifest
		for _, m := range b.find(kind) {
			l := podTemplate(m.obj).Labels
			if l["app.kubernetes.io/name"] == "seckill" && l["app.kubernetes.io/component"] == role {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			probs.addf("k8s: want one %s labelled component=%s, found %d", kind, role, len(found))
			continue
		}
		m := found[0]
		spec := podTemplate(m.obj).Spec
		if len(spec.Containers) != 1 {
			probs.addf("%s: want one container, found %d", m, len(spec.Containers))
			continue
		}
		c := spec.Containers[0]
		if imageName(c.Image) != seckillImage {
			probs.addf("%s: image %q, want the %s image", m, c.Image, seckillImage)
		} else if ref := seckillRef(b, c.Image); floatingTag(ref) {
			// A rollout happens when the pod template changes: a tag that is pushed again
			// changes none, so nothing rolls out, and a node keeps the image it pulled first
			// (IfNotPresent) or pods pull whichever push is current as they start (Always):
			// roles and the migration Job of different builds side by side.
			probs.addf("%s: image %s (pull policy %s): a re-push of a floating tag rolls nothing out and nodes keep stale images; pin the release's version tag or a digest in kustomization.yaml", m, ref, c.ImagePullPolicy)
		}
		if len(c.Command) != 0 || !slices.Equal(c.Args, []string{role}) {
			probs.addf("%s: command %q args %q, want the image's entrypoint with args [%s]", m, c.Command, c.Args, role)
		}
		wantEnv := commonEnv
		if role == "migrate" {
			wantEnv = migrateEnv
		}
		for _, key := range wantEnv {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == key }) {
				probs.addf("%s: lacks env %s", m, key)
			}
		}
		for _, key := range credentialURLs {
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == key })
			if i >= 0 && (c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil) {
				probs.addf("%s: %s must come from a Secret (secretKeyRef): the URL carries the server's password", m, key)
			}
		}
		if job, ok := m.obj.(*batchv1.Job); ok {
			// A Job's pod template is immutable: until the finished Job is gone, an apply
			// with a new image fails with "field is immutable".
			if ttl := job.Spec.TTLSecondsAfterFinished; ttl == nil || *ttl > 60 {
				probs.addf("%s: ttlSecondsAfterFinished must be set and at most 60, or the next apply with a new image fails (field is immutable) until the Job is gone", m)
			}
			// With OnFailure the kubelet retries in the one pod, and the Job controller
			// terminates that pod when the Job fails: the failed run's log goes with it, in
			// the very minute the README gives for reading it. With Never each try is a pod of
			// its own, kept, with its log, until the Job's TTL removes the Job.
			if p := job.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyNever {
				probs.addf("%s: restartPolicy %q, want Never: with OnFailure the Job's failure terminates its pod, and the log of the failed migration with it", m, p)
			}
		}
		if kind != "apps/v1/Deployment" {
			continue
		}

		if g := spec.TerminationGracePeriodSeconds; g == nil || *g != terminationGrace[role] {
			probs.addf("%s: terminationGracePeriodSeconds must be %d (SIGTERM drains in-flight work)", m, terminationGrace[role])
		} else if role == "api" {
			// The drain delay is the operator's to set: a longer one must still end before
			// the kubelet's SIGKILL, or the purchases in flight and the orders the producer
			// holds die with the process.
			delay := defaultDrainDelay
			if v, ok := envValue(b, c, "SECKILL_DRAIN_DELAY"); ok {
				if d, err := time.ParseDuration(v); err != nil || d < 0 {
					probs.addf("%s: SECKILL_DRAIN_DELAY=%q is not a duration", m, v)
				} else {
					delay = d
				}
			}
			pre := preStopSeconds(c)
			if need := pre + int64(math.Ceil(delay.Seconds())) + apiStopSeconds; *g < need {
				probs.addf("%s: terminationGracePeriodSeconds %d < preStop %d s + drain delay %s + shutdown 15 s + producer flush 10 s = %d s", m, *g, pre, delay, need)
			}
		}
		d := m.obj.(*appsv1.Deployment)
		if d.Spec.Replicas == nil || *d.Spec.Replicas < minReplicas[role] {
			probs.addf("%s: want at least %d replicas", m, minReplicas[role])
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas > 1 {
			probs = append(probs, checkReplicated(m, d, b)...)
		}
		ports := map[string]int{}
		for _, env := range []string{listenEnv[role], probeEnv[role]} {
			if _, done := ports[env]; done {
				continue
			}
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env })
			if i < 0 {
				probs.addf("%s: lacks env %s, an address it listens on", m, env)
				continue
			}
			port, ok := listenPort(c.Env[i].Value)
			n, err := strconv.Atoi(port)
			if !ok || err != nil {
				probs.addf("%s: %s=%q has no numeric port", m, env, c.Env[i].Value)
				continue
			}
			ports[env] = n
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == n }) {
				probs.addf("%s: listens on %d (%s) but declares no such container port", m, n, env)
			}
		}
		n, ok := ports[probeEnv[role]]
		if !ok {
			continue
		}
		for _, want := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"startup", c.StartupProbe, "/healthz"}} {
			if want.probe == nil || want.probe.HTTPGet == nil {
				probs.addf("%s: %s probe must be an HTTP GET of %s", m, want.name, want.path)
				continue
			}
			got, _ := resolvePort(c, want.probe.HTTPGet.Port)
			if want.probe.HTTPGet.Path != want.path || int(got) != n {
				probs.addf("%s: %s probe gets %s on port %s, want %s on %d", m, want.name,
					want.probe.HTTPGet.Path, want.probe.HTTPGet.Port.String(), want.path, n)
			}
		}

		// A probe that gives up before /readyz answers counts a failure whatever the answer: a
		// PostgreSQL that hangs (reported, not required by the api) would take every api out.
		if p := c.ReadinessProbe; p != nil && max(p.TimeoutSeconds, 1) <= readyzSeconds {
			probs.addf("%s: readiness probe timeoutSeconds %d, want more than the %d s /readyz may take when a dependency hangs",
				m, max(p.TimeoutSeconds, 1), readyzSeconds)
		}

		// The startup probe holds the liveness probe off while a process starts; it must not
		// be so short that a slow start is killed in a loop.
		if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < startupBudget {
			probs.addf("%s: startup probe allows %d s x %d, want at least %d s for a slow start",
				m, p.PeriodSeconds, p.FailureThreshold, startupBudget)
		}

		if role != "api" {
			continue
		}
		if d.Spec.Replicas != nil && *d.Spec.Replicas != minReplicas[role] {
			probs.addf("%s: want %d replicas", m, minReplicas[role])
		}
		maxConns, set := envValue(b, c, "SECKILL_MAX_CONNS")
		memLimit, _ := envValue(b, c, "GOMEMLIMIT")
		probs = append(probs, checkConnMemory(m.String(), maxConns, set, memLimit)...)
		for _, key := range apiSecrets {
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == key })
			if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
				probs.addf("%s: %s must come from a Secret (secretKeyRef)", m, key)
			}
		}
		// Behind an Ingress every buyer comes from the proxy's address: the per-address
		// limits would throttle the whole sale.
		for key, want := range map[string]string{"SECKILL_TRUST_PROXY_HEADERS": "true", "SECKILL_MAX_CONNS_PER_ADDR": "0"} {
			if got, ok := envValue(b, c, key); !ok || got != want {
				probs.addf("%s: %s=%q, want %q: behind an Ingress every buyer comes from the proxy's address", m, key, got, want)
			}
		}
		if !slices.ContainsFunc(b.find("v1/Service"), func(s manifest) bool {
			ok, _ := selects(&metav1.LabelSelector{MatchLabels: s.obj.(*corev1.Service).Spec.Selector}, d.Spec.Template.Labels)
			return ok
		}) {
			probs.addf("%s: no Service selects it", m)
		}
	}
	return probs
}

// checkReplicated checks what a Deployment of more than one pod needs: a
// PodDisruptionBudget that lets one pod go at a time, and its pods spread over nodes,
// so that neither a drain nor one node's death takes them all.
func checkReplicated(m manifest, d *appsv1.Deployment, b *bundle) problems {
	var probs problems
	own := d.Spec.Template.Labels
	var pdbs []*policyv1.PodDisruptionBudget
	for _, p := range b.find("policy/v1/PodDisruptionBudget") {
		pdb := p.obj.(*policyv1.PodDisruptionBudget)
		if ok, _ := selects(pdb.Spec.Selector, own); ok {
			pdbs = append(pdbs, pdb)
		}
	}
	switch {
	case len(pdbs) == 0:
		probs.addf("%s: %d replicas and no PodDisruptionBudget selects it", m, *d.Spec.Replicas)
	case len(pdbs) > 1:
		probs.addf("%s: %d PodDisruptionBudgets select it (the eviction API refuses pods with more than one)", m, len(pdbs))
	default:
		if mu := pdbs[0].Spec.MaxUnavailable; pdbs[0].Spec.MinAvailable != nil || mu == nil || *mu != intstr.FromInt32(1) {
			probs.addf("%s: PodDisruptionBudget %s must set maxUnavailable: 1 (one pod at a time, whatever the replicas)", m, pdbs[0].Name)
		}
	}

	spread := slices.ContainsFunc(d.Spec.Template.Spec.TopologySpreadConstraints, func(t corev1.TopologySpreadConstraint) bool {
		ok, _ := selects(t.LabelSelector, own)
		return ok && t.TopologyKey == "kubernetes.io/hostname" && t.MaxSkew == 1
	})
	// Without pod-template-hash the skew of a rolling update's new pod counts the old pods
	// that are about to go: on two nodes the second new compensator sees one pod on each and
	// may join the first, and once the old ones are gone both are on one node, whose death
	// stops the sweeper. With it, each revision is spread on its own.
	for _, t := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if ok, _ := selects(t.LabelSelector, own); ok && !slices.Contains(t.MatchLabelKeys, "pod-template-hash") {
			probs.addf("%s: topologySpreadConstraint on %s without matchLabelKeys [pod-template-hash]: a rolling update spreads its new pods around the old ones, and may leave them on one node", m, t.TopologyKey)
		}
	}
	if a := d.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		terms := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
		spread = spread || slices.ContainsFunc(terms, func(t corev1.PodAffinityTerm) bool {
			ok, _ := selects(t.LabelSelector, own)
			return ok && t.TopologyKey == "kubernetes.io/hostname"
		})
	}
	if !spread {
		probs.addf("%s: %d replicas not spread over nodes: want a topologySpreadConstraint (maxSkew 1) or a podAntiAffinity on kubernetes.io/hostname selecting its own pods", m, *d.Spec.Replicas)
	}
	return probs
}

// preStopSeconds is how long a container's preStop hook sleeps, 0 without one.
func preStopSeconds(c corev1.Container) int64 {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		return 0
	}
	return c.Lifecycle.PreStop.Sleep.Seconds
}

// envValue returns the value a container's variable gets, literal or from a ConfigMap
// or Secret of the bundle.
func envValue(b *bundle, c corev1.Container, name string) (string, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return "", false
	}
	e := c.Env[i]
	switch {
	case e.ValueFrom == nil:
		return e.Value, true
	case e.ValueFrom.ConfigMapKeyRef != nil:
		if cm, _ := b.get("v1/ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name).(*corev1.ConfigMap); cm != nil {
			v, ok := cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			return v, ok
		}
	case e.ValueFrom.SecretKeyRef != nil:
		if s, _ := b.get("v1/Secret", e.ValueFrom.SecretKeyRef.Name).(*corev1.Secret); s != nil {
			v, ok := secretData(s)[e.ValueFrom.SecretKeyRef.Key]
			return v, ok
		}
	}
	return "", false
}

// checkInfra checks that the roles' configuration reaches the services of the
// infra/ starting point: same namespace, hosts and ports, PostgreSQL credentials.
func checkInfra(app, infra *bundle) problems {
	var probs problems
	if infra.kust.Namespace != app.kust.Namespace {
		probs.addf("infra/kustomization.yaml: namespace %s, want %s like deploy/k8s", infra.kust.Namespace, app.kust.Namespace)
	}
	if app.get("v1/Namespace", app.kust.Namespace) == nil {
		probs.addf("kustomization.yaml: no Namespace %s among its resources", app.kust.Namespace)
	}

	value := func(key string) string {
		v, ok := configValue(app, key)
		if !ok {
			probs.addf("k8s: no ConfigMap or Secret holds %s", key)
		}
		return v
	}
	reaches := func(key, hostport string) {
		host, port, _ := strings.Cut(hostport, ":")
		if !serviceExposes(infra, host, port) {
			probs.addf("k8s: %s points at %s, which no Service in infra/ exposes", key, hostport)
		}
	}

	if u, err := url.Parse(value("SECKILL_REDIS_URL")); err == nil {
		reaches("SECKILL_REDIS_URL", u.Host)
		probs = append(probs, checkInfraRedis(infra, u)...)
	}
	for _, broker := range strings.Split(value("SECKILL_KAFKA_BROKERS"), ",") {
		reaches("SECKILL_KAFKA_BROKERS", broker)
	}
	u, err := url.Parse(value("SECKILL_POSTGRES_URL"))
	if err != nil {
		probs.addf("k8s: SECKILL_POSTGRES_URL: %v", err)
		return probs
	}
	// deploy/k8s is what production copies: a URL that sends the orders and the password
	// unencrypted, or to a server whose certificate nobody checks, must not be the example.
	// deploy/k8s-try says disable for infra/'s server, which has no TLS.
	if mode := u.Query().Get("sslmode"); !slices.Contains(verifiedSSLModes, mode) {
		probs.addf("secret.yaml: SECKILL_POSTGRES_URL has sslmode=%q, want one of %v: production copies it as it is (deploy/k8s-try sets disable for infra/)", mode, verifiedSSLModes)
	}
	probs = append(probs, checkInfraPostgres(app, infra, "SECKILL_POSTGRES_URL", u)...)
	return probs
}

// verifiedSSLModes are the sslmodes under which lib/pq checks the server's certificate. Its
// default, require, encrypts without checking whom it talks to.
var verifiedSSLModes = []string{"verify-full", "verify-ca"}

// checkInfraPostgres checks that a PostgreSQL URL (u, named where) reaches infra/'s server
// with its user, database and password, and that the server admits the roles' connections.
func checkInfraPostgres(app, infra *bundle, where string, u *url.URL) problems {
	var probs problems
	host, port, _ := strings.Cut(u.Host, ":")
	if !serviceExposes(infra, host, port) {
		probs.addf("k8s: %s points at %s, which no Service in infra/ exposes", where, u.Host)
	}
	sts, _ := infra.get("apps/v1/StatefulSet", "postgres").(*appsv1.StatefulSet)
	if sts == nil || len(sts.Spec.Template.Spec.Containers) == 0 {
		probs.addf("infra: no StatefulSet postgres")
		return probs
	}
	pg := sts.Spec.Template.Spec.Containers[0]
	probs = append(probs, checkPGConns("infra: postgres", seckillPods(app), slices.Concat(pg.Command, pg.Args))...)
	pass, _ := u.User.Password()
	for _, want := range []struct{ env, got string }{
		{"POSTGRES_USER", u.User.Username()},
		{"POSTGRES_DB", strings.TrimPrefix(u.Path, "/")},
		{"POSTGRES_PASSWORD", pass},
	} {
		i := slices.IndexFunc(pg.Env, func(e corev1.EnvVar) bool { return e.Name == want.env })
		if i < 0 {
			probs.addf("infra: postgres lacks %s", want.env)
			continue
		}
		v := pg.Env[i].Value
		if ref := pg.Env[i].ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			if s, _ := infra.get("v1/Secret", ref.SecretKeyRef.Name).(*corev1.Secret); s != nil {
				v = secretData(s)[ref.SecretKeyRef.Key]
			}
		}
		if v != want.got {
			probs.addf("k8s: %s's %s does not match infra/ postgres %s", where, strings.ToLower(strings.TrimPrefix(want.env, "POSTGRES_")), want.env)
		}
	}
	return probs
}

// checkInfraRedis checks that infra/'s Redis asks for a password, REDIS_PASSWORD from its
// Secret, and that the roles' SECKILL_REDIS_URL (u) sends that one.
func checkInfraRedis(infra *bundle, u *url.URL) problems {
	var probs problems
	sts, _ := infra.get("apps/v1/StatefulSet", "redis").(*appsv1.StatefulSet)
	if sts == nil || len(sts.Spec.Template.Spec.Containers) == 0 {
		probs.addf("infra: no StatefulSet redis")
		return probs
	}
	c := sts.Spec.Template.Spec.Containers[0]
	args := slices.Concat(c.Command, c.Args)
	if i := slices.Index(args, "--requirepass"); i < 0 || i+1 == len(args) || args[i+1] != "$(REDIS_PASSWORD)" {
		probs.addf("infra: redis runs without --requirepass $(REDIS_PASSWORD): any pod of the cluster could use it")
	}
	probs = append(probs, checkRedisMemory(c, args)...)
	want, ok := envValue(infra, c, "REDIS_PASSWORD")
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "REDIS_PASSWORD" }); !ok || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
		probs.addf("infra: redis lacks REDIS_PASSWORD from a Secret")
		return probs
	}
	if got, _ := u.User.Password(); got != want {
		probs.addf("k8s: SECKILL_REDIS_URL's password does not match infra/ redis REDIS_PASSWORD")
	}
	return probs
}

// checkRedisMemory checks that a Redis server refuses writes before it outgrows its memory
// limit and never evicts. Without maxmemory it grows until the kernel's OOM killer ends it,
// losing the last second of its AOF and freezing every campaign until the compensator rebuilds
// them; an eviction policy drops a reservation, an idempotency record or a campaign's stock
// key when memory runs short, and the sale's invariants with it. At maxmemory with noeviction
// Redis refuses the next reserve (a 503 the buyer retries) and keeps what it holds.
func checkRedisMemory(c corev1.Container, args []string) problems {
	var probs problems
	arg := func(name string) (string, bool) {
		i := slices.Index(args, name)
		if i < 0 || i+1 == len(args) {
			return "", false
		}
		return args[i+1], true
	}
	if p, _ := arg("--maxmemory-policy"); p != "noeviction" {
		probs.addf("infra: redis --maxmemory-policy %q, want noeviction: an evicted reservation, idempotency record or stock key breaks the sale", p)
	}
	limit, hasLimit := c.Resources.Limits[corev1.ResourceMemory]
	v, ok := arg("--maxmemory")
	n, err := redisBytes(v)
	switch {
	case !ok:
		probs.addf("infra: redis runs without --maxmemory: it grows until the OOM killer ends it")
	case err != nil:
		probs.addf("infra: redis --maxmemory %q: %v", v, err)
	case !hasLimit || n <= 0 || n > limit.Value()*60/100:
		// An AOF rewrite forks, and the child's copy-on-write pages count against the limit.
		probs.addf("infra: redis --maxmemory %s, want more than 0 and at most 60%% of its memory limit %s: an AOF rewrite's fork needs the rest", v, limit.String())
	}
	return probs
}

// redisBytes parses a Redis memory size: a number with an optional k, kb, m, mb, g or gb
// (k is 1000, kb 1024), as redis.conf reads it.
func redisBytes(v string) (int64, error) {
	v = strings.ToLower(v)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}} {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			return n * u.mul, err
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

// selects reports whether a non-empty selector matches a set of labels.
func selects(sel *metav1.LabelSelector, lbls map[string]string) (bool, error) {
	if sel == nil {
		return false, fmt.Errorf("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, fmt.Errorf("empty selector selects everything")
	}
	return s.Matches(labels.Set(lbls)), nil
}

// selectedWorkloads returns the Deployments and StatefulSets whose pods sel selects.
func selectedWorkloads(b *bundle, sel *metav1.LabelSelector) []manifest {
	var out []manifest
	for _, m := range b.objs {
		if m.kind != "apps/v1/Deployment" && m.kind != "apps/v1/StatefulSet" {
			continue
		}
		if ok, _ := selects(sel, podTemplate(m.obj).Labels); ok {
			out = append(out, m)
		}
	}
	return out
}

// probePort returns the port an HTTP, TCP or gRPC probe reaches.
func probePort(p *corev1.Probe) (intstr.IntOrString, bool) {
	switch {
	case p.HTTPGet != nil:
		return p.HTTPGet.Port, true
	case p.TCPSocket != nil:
		return p.TCPSocket.Port, true
	case p.GRPC != nil:
		return intstr.FromInt32(p.GRPC.Port), true
	}
	return intstr.IntOrString{}, false
}

// resolvePort returns the container port a port number or name refers to.
func resolvePort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// serviceExposes reports whether a bundle has a Service named host with port.
func serviceExposes(b *bundle, host, port string) bool {
	svc, _ := b.get("v1/Service", host).(*corev1.Service)
	if svc == nil {
		return false
	}
	return slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port })
}

// configValue returns the value of key in any ConfigMap or Secret of a bundle.
func configValue(b *bundle, key string) (string, bool) {
	for _, m := range b.objs {
		switch o := m.obj.(type) {
		case *corev1.ConfigMap:
			if v, ok := o.Data[key]; ok {
				return v, true
			}
		case *corev1.Secret:
			if v, ok := secretData(o)[key]; ok {
				return v, true
			}
		}
	}
	return "", false
}

// urlHasPassword reports whether v is a URL whose user info or query carries a password
// (redis://:pass@host, redis+sentinel://…?sentinel_password=pass).
func urlHasPassword(v string) bool {
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" {
		return false
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	for key, vals := range u.Query() {
		if strings.Contains(strings.ToLower(key), "password") && slices.ContainsFunc(vals, func(s string) bool { return s != "" }) {
			return true
		}
	}
	return false
}

// secretData merges a Secret's data and stringData, as the API server does.
func secretData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// seckillRef is the image reference kustomize gives a container whose image is the
// seckill image: the kustomization's images entry overrides the manifest's tag.
func seckillRef(b *bundle, image string) string {
	name, tag, digest := imageName(image), "", ""
	if before, d, ok := strings.Cut(image, "@"); ok {
		image, digest = before, d
	}
	if len(image) > len(name) {
		tag = image[len(name)+1:]
	}
	for _, i := range b.kust.Images {
		if i.Name != name {
			continue
		}
		if i.NewName != "" {
			name = i.NewName
		}
		if i.NewTag != "" {
			tag = i.NewTag
		}
		if i.Digest != "" {
			digest = i.Digest
		}
	}
	switch {
	case digest != "":
		return name + "@" + digest
	case tag != "":
		return name + ":" + tag
	}
	return name
}

// floatingTag reports whether ref names an image by a tag that every build is pushed as:
// latest, or no tag at all, which means latest.
func floatingTag(ref string) bool {
	if strings.Contains(ref, "@") {
		return false
	}
	name := imageName(ref)
	return ref == name || ref == name+":latest"
}

// imageName strips the tag and digest from an image reference.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

func seccompType(container, pod *corev1.SeccompProfile) corev1.SeccompProfileType {
	if container != nil {
		return container.Type
	}
	if pod != nil {
		return pod.Type
	}
	return ""
}

func isTrue(b *bool) bool { return b != nil && *b }

func k8sDir(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(deployDir(tb), "k8s")
}

func TestK8sManifests(t *testing.T) {
	bundles, probs, err := loadBundles(os.DirFS(k8sDir(t)))
	if err != nil {
		t.Fatal(err)
	}
	probs.report(t)
	if len(bundles) == 0 {
		t.Fatal("no kustomization found under deploy/k8s")
	}
	checkK8s(bundles).report(t)
}

// appAndInfra returns the bundles of deploy/k8s and deploy/k8s/infra (nil when missing).
func appAndInfra(bundles []*bundle) (app, infra *bundle) {
	for _, b := range bundles {
		switch b.dir {
		case ".":
			app = b
		case "infra":
			infra = b
		}
	}
	return app, infra
}

// The api's connections against its memory. Each open connection holds a goroutine and its
// buffers: the bench's idle-conns measures 15-17 KB of RSS per connection on top of 83-85 MB
// after a flash crowd (README, Performance), and fails above 32 KB. Without SECKILL_MAX_CONNS
// the cap is the open-file limit less 1,024 (api.DefaultMaxConns), about a million in a
// container, so a crowd of connections grows the api past its memory limit (about 28,000 at
// 512 MiB), where the kernel kills it with every purchase in flight and its buyers reconnect
// to the other apis, instead of the cap closing the connections over it at accept.
const (
	apiConnBytes = 32 << 10 // the bench's bound per connection
	apiBaseBytes = 96 << 20 // the api's RSS after a flash crowd, with room
)

// checkConnMemory checks that maxConns connections fit in the api's GOMEMLIMIT.
func checkConnMemory(where, maxConns string, set bool, memLimit string) problems {
	var probs problems
	limit, err := goMemLimit(memLimit)
	if err != nil {
		probs.addf("%s: GOMEMLIMIT %q: %v", where, memLimit, err)
		return probs
	}
	fits := (limit - apiBaseBytes) / apiConnBytes
	n, err := strconv.ParseInt(maxConns, 10, 64)
	switch {
	case !set:
		probs.addf("%s: no SECKILL_MAX_CONNS: the default (the open-file limit less 1024, about a million in a container) lets connections outgrow GOMEMLIMIT %s; want 1 to %d", where, memLimit, fits)
	case err != nil || n <= 0 || n > fits:
		probs.addf("%s: SECKILL_MAX_CONNS=%q: %d KB each beside %d MB do not fit GOMEMLIMIT %s; want 1 to %d", where, maxConns, apiConnBytes>>10, apiBaseBytes>>20, memLimit, fits)
	}
	return probs
}

// TestSeckillRef: the check sees the reference kustomize produces, so a release's tag or
// digest in kustomization.yaml passes whatever the manifest says.
func TestSeckillRef(t *testing.T) {
	tests := []struct {
		image    string
		kust     kustomizeImage
		want     string
		floating bool
	}{
		{"seckill", kustomizeImage{Name: "seckill", NewTag: "v1.2.3"}, "seckill:v1.2.3", false},
		{"seckill:latest", kustomizeImage{Name: "seckill", NewName: "registry.example.com:5000/seckill", NewTag: "v1.2.3"}, "registry.example.com:5000/seckill:v1.2.3", false},
		{"seckill", kustomizeImage{Name: "seckill", Digest: "sha256:0123"}, "seckill@sha256:0123", false},
		{"seckill:v1", kustomizeImage{Name: "other", NewTag: "latest"}, "seckill:v1", false},
		{"seckill", kustomizeImage{Name: "seckill", NewName: "registry.example.com/seckill"}, "registry.example.com/seckill", true},
		{"seckill:v1", kustomizeImage{Name: "seckill", NewTag: "latest"}, "seckill:latest", true},
	}
	for _, tt := range tests {
		b := &bundle{kust: kustomization{Images: []kustomizeImage{tt.kust}}}
		got := seckillRef(b, tt.image)
		if got != tt.want || floatingTag(got) != tt.floating {
			t.Errorf("%s with %+v: %s (floating %t), want %s (floating %t)", tt.image, tt.kust, got, floatingTag(got), tt.want, tt.floating)
		}
	}
}

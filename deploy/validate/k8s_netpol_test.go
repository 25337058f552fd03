package validate

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The NetworkPolicies of deploy/k8s and deploy/k8s/infra, read as the API server would
// store them and evaluated here as a NetworkPolicy plugin would: a pod selected by a
// policy with Ingress among its types accepts a connection only when a rule of one of
// those policies admits its port and its source. The checks ask that question of every
// pod the manifests run, from the sources that matter: a role pod, a stranger pod of the
// namespace, a Prometheus pod of the monitoring namespace, a pod of another namespace,
// and an address outside the cluster.
//
// The kubelet is not among them: Kubernetes' NetworkPolicy documentation states that
// traffic from the node a pod runs on is always allowed, so probes pass whatever the
// policies say. The checks still ask that every probe port be admitted from somewhere,
// so that no port a probe needs is one nothing may reach.

// monitoringNamespace is the namespace deploy/k8s's policies let scrape the ops ports:
// the label kubernetes.io/metadata.name, which the API server sets on every namespace.
const monitoringNamespace = "monitoring"

// netSource is where a connection comes from: a pod (ns set) or an address outside the
// cluster (ns empty, ip set).
type netSource struct {
	name     string // for messages
	ns       string
	nsLabels map[string]string
	labels   map[string]string
	ip       netip.Addr
}

// netPod is a pod a workload runs, with what a policy can select it by.
type netPod struct {
	m      manifest
	ns     string
	labels map[string]string
	ports  []corev1.ContainerPort
}

func (p netPod) String() string { return p.m.String() }

// source is the pod as the source of a connection.
func (p netPod) source(nsLabels map[string]string) netSource {
	return netSource{name: p.String(), ns: p.ns, nsLabels: nsLabels, labels: p.labels}
}

// netPods returns the pods of a bundle's workloads.
func netPods(b *bundle) []netPod {
	var out []netPod
	for _, m := range b.objs {
		tmpl := podTemplate(m.obj)
		if tmpl == nil {
			continue
		}
		p := netPod{m: m, ns: b.kust.Namespace, labels: tmpl.Labels}
		for _, c := range tmpl.Spec.Containers {
			p.ports = append(p.ports, c.Ports...)
		}
		out = append(out, p)
	}
	return out
}

// netPolicy is a NetworkPolicy with the namespace its kustomization gives it.
type netPolicy struct {
	m   manifest
	ns  string
	pol *networkingv1.NetworkPolicy
}

func netPolicies(bundles ...*bundle) []netPolicy {
	var out []netPolicy
	for _, b := range bundles {
		for _, m := range b.find("networking.k8s.io/v1/NetworkPolicy") {
			out = append(out, netPolicy{m: m, ns: b.kust.Namespace, pol: m.obj.(*networkingv1.NetworkPolicy)})
		}
	}
	return out
}

// isolatesIngress reports whether the policy selects p for its ingress: without
// policyTypes a policy is of type Ingress.
func (np netPolicy) isolatesIngress(p netPod) bool {
	types := np.pol.Spec.PolicyTypes
	if len(types) != 0 && !slices.Contains(types, networkingv1.PolicyTypeIngress) {
		return false
	}
	return np.ns == p.ns && matches(&np.pol.Spec.PodSelector, p.labels)
}

// matches reports whether a selector matches labels; an empty selector matches all.
func matches(sel *metav1.LabelSelector, lbls map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(lbls))
}

// portMatches reports whether a rule's ports admit port (TCP) on p; no ports admit all.
func portMatches(ports []networkingv1.NetworkPolicyPort, p netPod, port int32) bool {
	return protoPortMatches(ports, p, port, corev1.ProtocolTCP)
}

// protoPortMatches reports whether a rule's ports admit port over proto (a named port is
// p's); no ports admit all.
func protoPortMatches(ports []networkingv1.NetworkPolicyPort, p netPod, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		if (pp.Protocol == nil && proto != corev1.ProtocolTCP) || (pp.Protocol != nil && *pp.Protocol != proto) {
			continue
		}
		switch {
		case pp.Port == nil:
			return true
		case pp.Port.Type == intstr.String:
			if slices.ContainsFunc(p.ports, func(cp corev1.ContainerPort) bool {
				return cp.Name == pp.Port.StrVal && cp.ContainerPort == port && (cp.Protocol == proto || cp.Protocol == "" && proto == corev1.ProtocolTCP)
			}) {
				return true
			}
		case pp.EndPort != nil:
			if pp.Port.IntVal <= port && port <= *pp.EndPort {
				return true
			}
		case pp.Port.IntVal == port:
			return true
		}
	}
	return false
}

// peerMatches reports whether a rule's sources (in namespace ns) include src; none
// include every source.
func peerMatches(from []networkingv1.NetworkPolicyPeer, ns string, src netSource) bool {
	if len(from) == 0 {
		return true
	}
	for _, peer := range from {
		switch {
		case peer.IPBlock != nil:
			if src.ns == "" && inBlock(peer.IPBlock, src.ip) {
				return true
			}
		case src.ns == "":
		case peer.NamespaceSelector == nil:
			if src.ns == ns && matches(peer.PodSelector, src.labels) {
				return true
			}
		default:
			if matches(peer.NamespaceSelector, src.nsLabels) && (peer.PodSelector == nil || matches(peer.PodSelector, src.labels)) {
				return true
			}
		}
	}
	return false
}

func inBlock(b *networkingv1.IPBlock, ip netip.Addr) bool {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Contains(ip) {
		return false
	}
	return !slices.ContainsFunc(b.Except, func(e string) bool {
		ex, err := netip.ParsePrefix(e)
		return err == nil && ex.Contains(ip)
	})
}

// admits reports whether the policies let src connect to port on p.
func admits(pols []netPolicy, p netPod, port int32, src netSource) bool {
	isolated := false
	for _, np := range pols {
		if !np.isolatesIngress(p) {
			continue
		}
		isolated = true
		for _, r := range np.pol.Spec.Ingress {
			if portMatches(r.Ports, p, port) && peerMatches(r.From, np.ns, src) {
				return true
			}
		}
	}
	return !isolated
}

// admitsAny reports whether some rule admits port on p from some source, and whether
// one admits it from outside p's namespace (another namespace or an address).
func admitsAny(pols []netPolicy, p netPod, port int32) (some, outside bool) {
	isolated := false
	for _, np := range pols {
		if !np.isolatesIngress(p) {
			continue
		}
		isolated = true
		for _, r := range np.pol.Spec.Ingress {
			if !portMatches(r.Ports, p, port) {
				continue
			}
			some = true
			if len(r.From) == 0 || slices.ContainsFunc(r.From, func(peer networkingv1.NetworkPolicyPeer) bool {
				return peer.IPBlock != nil || peer.NamespaceSelector != nil
			}) {
				outside = true
			}
		}
	}
	if !isolated {
		return true, true
	}
	return some, outside
}

// nsLabels returns the labels of a namespace as the API server keeps them: its own and
// kubernetes.io/metadata.name.
func nsLabels(b *bundle, ns string) map[string]string {
	out := map[string]string{"kubernetes.io/metadata.name": ns}
	if n, _ := b.get("v1/Namespace", ns).(*corev1.Namespace); n != nil {
		for k, v := range n.Labels {
			out[k] = v
		}
	}
	return out
}

// strangers are sources that no policy here should let in, except to the api's public port.
func strangers(ns string, seckillNS map[string]string) []netSource {
	return []netSource{
		{name: "a pod of the namespace that is no role", ns: ns, nsLabels: seckillNS, labels: map[string]string{"app": "debug"}},
		{name: "an operator's seckill pod of no role", ns: ns, nsLabels: seckillNS, labels: map[string]string{"app.kubernetes.io/name": "seckill", "app.kubernetes.io/component": "audit"}},
		{name: "a pod of namespace default", ns: "default", nsLabels: map[string]string{"kubernetes.io/metadata.name": "default"}, labels: map[string]string{"app": "debug"}},
		{name: "an address outside the cluster", ip: netip.MustParseAddr("198.51.100.7")},
	}
}

// prometheusPod is a Prometheus server of the monitoring namespace.
var prometheusPod = netSource{
	name:     "Prometheus in namespace " + monitoringNamespace,
	ns:       monitoringNamespace,
	nsLabels: map[string]string{"kubernetes.io/metadata.name": monitoringNamespace},
	labels:   map[string]string{"app.kubernetes.io/name": "prometheus"},
}

// checkNetworkPolicies checks the policies of deploy/k8s (the roles) and infra/ (the
// servers), alone and together as deploy/k8s-try applies them.
func checkNetworkPolicies(app, infra *bundle) problems {
	var probs problems
	appPols, infraPols := netPolicies(app), netPolicies(infra)
	allPols := netPolicies(app, infra)
	ns := app.kust.Namespace
	seckillNS := nsLabels(app, ns)

	// Egress is open in deploy/k8s (README, Network policies); one added must still let each
	// role reach DNS and the ports of the servers it is given.
	for _, set := range [][]netPolicy{appPols, allPols} {
		probs = append(probs, checkEgress(app, set)...)
	}

	// Every role's pod is isolated by a policy that admits nothing, so that what the others
	// admit is all it accepts; every server of infra/ by its own policies, so that infra/
	// applied alone is not open either.
	appPods := netPods(app)
	for _, p := range appPods {
		if !slices.ContainsFunc(appPols, func(np netPolicy) bool { return np.isolatesIngress(p) && len(np.pol.Spec.Ingress) == 0 }) {
			probs.addf("%s: its pods are selected by no default-deny NetworkPolicy (Ingress, no rules) of deploy/k8s: any pod of the cluster reaches every port", p)
		}
	}
	infraPods := netPods(infra)
	for _, p := range infraPods {
		if !slices.ContainsFunc(infraPols, func(np netPolicy) bool { return np.isolatesIngress(p) }) {
			probs.addf("%s: selected by no NetworkPolicy of infra/: applied alone, any pod of the cluster reaches it", p)
		}
	}

	// What deploy/k8s itself admits to each role: the api's public port from outside the
	// namespace (the Ingress controller or the load balancer), the ops port from
	// Prometheus, and nothing to anyone else.
	public := map[string]int32{} // pod -> public port
	scrape := map[string]int32{}
	for _, p := range appPods {
		tmpl := podTemplate(p.m.obj)
		if p.labels["app.kubernetes.io/component"] == "api" {
			for _, c := range tmpl.Spec.Containers {
				if v, ok := envValue(app, c, listenEnv["api"]); ok {
					if port, ok := portNumber(v); ok {
						public[p.String()] = port
					}
				}
			}
			port, ok := public[p.String()]
			if !ok {
				probs.addf("%s: no %s to find its public port by", p, listenEnv["api"])
			} else if _, outside := admitsAny(appPols, p, port); !outside {
				probs.addf("%s: its public port %d is admitted from nowhere outside namespace %s: buyers reach no api", p, port, ns)
			}
		}
		if tmpl.Annotations["prometheus.io/scrape"] == "true" {
			port, ok := portNumber(":" + tmpl.Annotations["prometheus.io/port"])
			if !ok {
				probs.addf("%s: prometheus.io/port %q is no port", p, tmpl.Annotations["prometheus.io/port"])
				continue
			}
			scrape[p.String()] = port
			if !admits(appPols, p, port, prometheusPod) {
				probs.addf("%s: its scrape port %d (prometheus.io/port) is not admitted from %s: no metrics, no alerts", p, port, prometheusPod.name)
			}
		}
	}
	for _, p := range appPods {
		ports := []int32{6060} // a port nobody declares: a debug listener, say
		for _, cp := range p.ports {
			ports = append(ports, cp.ContainerPort)
		}
		for _, port := range ports {
			if port == public[p.String()] {
				continue
			}
			srcs := strangers(ns, seckillNS)
			if port != scrape[p.String()] {
				srcs = append(srcs, prometheusPod)
			}
			for _, src := range srcs {
				if admits(appPols, p, port, src) {
					probs.addf("%s: port %d is admitted from %s: only the api's public port and the ops port (from Prometheus) are for others", p, port, src.name)
				}
			}
		}
	}

	// Every port a Service, a probe or a scrape uses is admitted from somewhere: deploy/k8s
	// on its own and with infra/ (deploy/k8s-try).
	for _, set := range []struct {
		b    *bundle
		pols []netPolicy
	}{{app, appPols}, {infra, allPols}} {
		for _, p := range netPods(set.b) {
			for _, use := range portUses(set.b, p) {
				if some, _ := admitsAny(set.pols, p, use.port); !some {
					probs.addf("%s: port %d (%s) is admitted from nowhere", p, use.port, use.by)
				}
			}
		}
	}

	probs = append(probs, checkInfraReach(app, infra, allPols, seckillNS)...)
	return probs
}

// egressAdmits reports whether the policies let p connect out to port over proto, to some
// destination: the destinations of managed servers are not the manifests' to know.
func egressAdmits(pols []netPolicy, p netPod, port int32, proto corev1.Protocol) bool {
	isolated := false
	for _, np := range pols {
		types := np.pol.Spec.PolicyTypes
		egress := slices.Contains(types, networkingv1.PolicyTypeEgress) || len(types) == 0 && len(np.pol.Spec.Egress) > 0
		if !egress || np.ns != p.ns || !matches(&np.pol.Spec.PodSelector, p.labels) {
			continue
		}
		isolated = true
		for _, r := range np.pol.Spec.Egress {
			if protoPortMatches(r.Ports, p, port, proto) {
				return true
			}
		}
	}
	return !isolated
}

// serverEnv are the variables that give a role a server's address.
var serverEnv = []string{"SECKILL_REDIS_URL", "SECKILL_POSTGRES_URL", "SECKILL_KAFKA_BROKERS"}

// checkEgress checks that every role may resolve names (53, UDP and TCP) and connect to the
// port of each server its configuration names.
func checkEgress(app *bundle, pols []netPolicy) problems {
	var probs problems
	for _, p := range netPods(app) {
		for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
			if !egressAdmits(pols, p, 53, proto) {
				probs.addf("%s: egress to DNS (53/%s) is admitted by no policy: it resolves no server's name", p, proto)
			}
		}
		for _, c := range podTemplate(p.m.obj).Spec.Containers {
			for _, env := range serverEnv {
				v, ok := envValue(app, c, env)
				if !ok {
					continue
				}
				for _, hp := range serverAddrs(v) {
					port, ok := portNumber(hp)
					if !ok {
						port = 5432 // the one URL here whose port may go unsaid
					}
					if !egressAdmits(pols, p, port, corev1.ProtocolTCP) {
						probs.addf("%s: egress to %s (%s) is admitted by no policy", p, hp, env)
					}
				}
			}
		}
	}
	return probs
}

type portUse struct {
	port int32
	by   string
}

// portUses returns the ports of a pod that a Service of the bundle targets or a probe reaches.
func portUses(b *bundle, p netPod) []portUse {
	var out []portUse
	tmpl := podTemplate(p.m.obj)
	for _, s := range b.find("v1/Service") {
		svc := s.obj.(*corev1.Service)
		if len(svc.Spec.Selector) == 0 || !matches(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, p.labels) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			for _, c := range tmpl.Spec.Containers {
				if n, ok := resolvePort(c, target); ok {
					out = append(out, portUse{n, "Service " + svc.Name})
				}
			}
		}
	}
	for _, c := range tmpl.Spec.Containers {
		for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if pr == nil {
				continue
			}
			if port, ok := probePort(pr); ok {
				if n, ok := resolvePort(c, port); ok {
					out = append(out, portUse{n, name + " probe"})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].by < out[j].by })
	return out
}

// checkInfraReach checks that each server of infra/ is reached on the port of its Service
// by every role given its address (SECKILL_REDIS_URL, SECKILL_KAFKA_BROKERS,
// SECKILL_POSTGRES_URL), and on no port by anything else: not the roles without that
// address, not the other servers, not a stranger. Kafka's pods may reach each other
// (brokers and controllers talk among themselves).
func checkInfraReach(app, infra *bundle, pols []netPolicy, seckillNS map[string]string) problems {
	var probs problems
	servers := netPods(infra)
	users := map[string]map[int32][]string{} // server pod -> port -> role pods that must reach it
	for _, role := range netPods(app) {
		for _, c := range podTemplate(role.m.obj).Spec.Containers {
			for _, env := range serverEnv {
				v, ok := envValue(app, c, env)
				if !ok {
					continue
				}
				for _, hp := range serverAddrs(v) {
					host, port, _ := strings.Cut(hp, ":")
					svc, _ := infra.get("v1/Service", host).(*corev1.Service)
					if svc == nil {
						continue // checkInfra says so
					}
					for _, sp := range svc.Spec.Ports {
						if fmt.Sprint(sp.Port) != port {
							continue
						}
						for _, srv := range servers {
							if len(svc.Spec.Selector) == 0 || !matches(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, srv.labels) {
								continue
							}
							target := sp.TargetPort
							if target.Type == intstr.Int && target.IntVal == 0 {
								target = intstr.FromInt32(sp.Port)
							}
							n, ok := int32(0), false
							for _, sc := range podTemplate(srv.m.obj).Spec.Containers {
								if n, ok = resolvePort(sc, target); ok {
									break
								}
							}
							if !ok {
								continue
							}
							if users[srv.String()] == nil {
								users[srv.String()] = map[int32][]string{}
							}
							if slices.Contains(users[srv.String()][n], role.String()) {
								continue
							}
							users[srv.String()][n] = append(users[srv.String()][n], role.String())
							if !admits(pols, srv, n, role.source(seckillNS)) {
								probs.addf("%s: %s (%s) cannot reach %s on %d", role, env, hp, srv, n)
							}
						}
					}
				}
			}
		}
	}

	// Nothing else: every pod of both bundles, and the strangers.
	var sources []netSource
	for _, p := range slices.Concat(netPods(app), servers) {
		sources = append(sources, p.source(seckillNS))
	}
	sources = append(sources, strangers(app.kust.Namespace, seckillNS)...)
	sources = append(sources, prometheusPod)
	for _, srv := range servers {
		if len(users[srv.String()]) == 0 {
			probs.addf("%s: no role is given its address: what is it for?", srv)
		}
		ports := []int32{6060}
		for _, cp := range srv.ports {
			ports = append(ports, cp.ContainerPort)
		}
		for _, port := range ports {
			allowed := append(slices.Clone(users[srv.String()][port]), srv.String()) // and a server's own pods
			for _, src := range sources {
				if !slices.Contains(allowed, src.name) && admits(pols, srv, port, src) {
					probs.addf("%s: port %d is admitted from %s, which is given no address of it on that port", srv, port, src.name)
				}
			}
		}
	}
	return probs
}

// serverAddrs returns the host:port addresses of a server setting: a URL (one host, or a
// comma-separated list for a Sentinel group or a Cluster) or a comma-separated broker list.
func serverAddrs(v string) []string {
	if u, err := url.Parse(v); err == nil && u.Scheme != "" && strings.Contains(v, "://") {
		return strings.Split(u.Host, ",")
	}
	return strings.Split(v, ",")
}

// portNumber returns the port of a listen address such as ":8080".
func portNumber(addr string) (int32, bool) {
	p, ok := listenPort(addr)
	if !ok {
		return 0, false
	}
	var n int32
	if _, err := fmt.Sscan(p, &n); err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// TestK8sEgressAccepted: an egress policy like the one README.md (Network policies) tells an
// operator to add, DNS and each server's port, passes the checks.
func TestK8sEgressAccepted(t *testing.T) {
	fsys := k8sFiles(t)
	const egress = `
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: seckill-egress
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: seckill
  policyTypes: [Egress]
  egress:
    - ports:
        - port: 53
          protocol: UDP
        - port: 53
          protocol: TCP
        - port: 5432
        - port: 6379
        - port: 9092
`
	fsys["networkpolicy.yaml"].Data = append(fsys["networkpolicy.yaml"].Data, egress...)
	bundles, probs, err := loadBundles(fsys)
	if err != nil {
		t.Fatal(err)
	}
	append(probs, checkK8s(bundles)...).report(t)
}

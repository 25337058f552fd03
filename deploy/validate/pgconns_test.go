package validate

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Every seckill process keeps a pool of connections to PostgreSQL (store.Open), up to
// SetMaxOpenConns of them and as many idle: an api answering order reads in a crowd, or a
// compensator resolving 16 orders at once, holds them. PostgreSQL refuses the connection
// past max_connections ("sorry, too many clients already"), and the role that asked fails
// its request or its batch, so the servers of deploy/ must admit every pool at once, with a
// rolling update's surge pod beside them.

// pgDefaultMaxConnections is PostgreSQL's max_connections when nothing sets it, and
// pgReserved its superuser_reserved_connections, which no seckill pool may take.
const (
	pgDefaultMaxConnections = 100
	pgReserved              = 3
)

var storePoolOnce = sync.OnceValues(func() (int, error) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "store.go"))
	if err != nil {
		return 0, err
	}
	most := 0
	for _, m := range regexp.MustCompile(`SetMaxOpenConns\((\d+)\)`).FindAllSubmatch(src, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		most = max(most, n)
	}
	if most == 0 {
		return 0, fmt.Errorf("store/store.go: no SetMaxOpenConns(N)")
	}
	return most, nil
})

// storePool is the most connections one seckill process opens to PostgreSQL, read from
// store/store.go so that a change there is checked against the servers here.
func storePool() (int, error) { return storePoolOnce() }

// pgMaxConnections is the max_connections a PostgreSQL started with args (the postgres
// image's command line: -c max_connections=N) admits.
func pgMaxConnections(args []string) (int, error) {
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "max_connections=")
		if !ok || i == 0 || args[i-1] != "-c" {
			continue
		}
		return strconv.Atoi(v)
	}
	return pgDefaultMaxConnections, nil
}

// checkPGConns reports when pods seckill processes, each with its pool, need more
// connections than a PostgreSQL started with args admits.
func checkPGConns(where string, pods map[string]int, args []string) problems {
	var probs problems
	pool, err := storePool()
	if err != nil {
		probs.addf("%s: %v", where, err)
		return probs
	}
	limit, err := pgMaxConnections(args)
	if err != nil {
		probs.addf("%s: max_connections: %v", where, err)
		return probs
	}
	total := 0
	for _, n := range pods {
		total += n
	}
	if need := total * pool; need > limit-pgReserved {
		probs.addf("%s: %d seckill processes %v with %d connections each need %d, but max_connections %d leaves %d (%d reserved)",
			where, total, pods, pool, need, limit, limit-pgReserved, pgReserved)
	}
	return probs
}

// seckillPods counts the seckill pods of app that can run at once: each Deployment's
// replicas and its rolling update's surge, and each Job's parallelism.
func seckillPods(app *bundle) map[string]int {
	pods := map[string]int{}
	for _, m := range app.objs {
		tmpl := podTemplate(m.obj)
		if tmpl == nil || len(tmpl.Spec.Containers) == 0 || imageName(tmpl.Spec.Containers[0].Image) != seckillImage {
			continue
		}
		n := 1
		switch w := m.obj.(type) {
		case *appsv1.Deployment:
			if w.Spec.Replicas != nil {
				n = int(*w.Spec.Replicas)
			}
			surge := intstr.FromString("25%") // the Deployment's default
			if ru := w.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
				surge = *ru.MaxSurge
			}
			if w.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				s, _ := intstr.GetScaledValueFromIntOrPercent(&surge, n, true)
				n += s
			}
		case *batchv1.Job:
			if w.Spec.Parallelism != nil {
				n = int(*w.Spec.Parallelism)
			}
		}
		pods[tmpl.Labels["app.kubernetes.io/component"]] += n
	}
	return pods
}

// Package redisurl reads the one URL that names seckill's Redis deployment, whatever its
// topology, into the options of a go-redis client:
//
//	redis://[user:pass@]host:port/db                            one server (rediss:// with TLS)
//	redis+sentinel://[user:pass@]s1:26379,s2:26379/master/db    a Sentinel group
//	redis+cluster://[user:pass@]n1:7000,n2:7001                 a Redis Cluster
//
// The user and password are those of the Redis servers (for Sentinel, the primary and its
// replicas; the sentinels' own take sentinel_username and sentinel_password in the query). The
// query takes go-redis's options (dial_timeout=3s, pool_size=100, …). The Sentinel and
// Cluster forms take TLS as rediss+sentinel:// and rediss+cluster://.
package redisurl

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/redact"
)

// ErrInvalid is wrapped by every error of Parse: the URL is wrong, which no retry mends.
var ErrInvalid = errors.New("invalid redis url")

// Topology is the kind of Redis deployment a URL names.
type Topology string

// The topologies.
const (
	Single   Topology = "single"
	Sentinel Topology = "sentinel"
	Cluster  Topology = "cluster"
)

// Options are a parsed URL: the go-redis options of its topology, the others nil.
type Options struct {
	Topology Topology
	Single   *redis.Options
	Sentinel *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// NewClient returns a client of the deployment.
func (o Options) NewClient() redis.UniversalClient {
	switch o.Topology {
	case Sentinel:
		return redis.NewFailoverClient(o.Sentinel)
	case Cluster:
		return redis.NewClusterClient(o.Cluster)
	}
	return redis.NewClient(o.Single)
}

// SetPoolSize sets the most connections per server.
func (o Options) SetPoolSize(n int) {
	switch o.Topology {
	case Sentinel:
		o.Sentinel.PoolSize = n
	case Cluster:
		o.Cluster.PoolSize = n
	default:
		o.Single.PoolSize = n
	}
}

// Parse reads s. Its errors wrap ErrInvalid and never quote s, which may hold a password.
func Parse(s string) (Options, error) {
	o, err := parse(s)
	if err != nil {
		return Options{}, fmt.Errorf("%w: %w", ErrInvalid, redact.ParseError(s, err))
	}
	return o, nil
}

func parse(s string) (Options, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Options{}, errors.New("want scheme://host:port…")
	}
	// A fragment names nothing in any form, and dropping it silently changes the URL: a
	// master "mymaster#primary" is asked for as "mymaster", a sentinel_password=a#b is "a".
	// (A '#' in the user or password is misplacedUserinfo's, which says more.)
	if strings.Contains(rest, "#") {
		return Options{}, errors.New("a '#': percent-encode it as %23 in a password, a name or an option (a fragment names nothing here)")
	}
	base, topo, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return Options{}, unknownScheme(scheme)
	}
	switch topo {
	case "":
		opt, err := redis.ParseURL(s)
		if err != nil {
			return Options{}, err
		}
		// go-redis takes "n1:7000,n2:7001" for one host named "n1:7000,n2" that no dial finds:
		// the role would wait out a Redis that is down instead of exiting on a wrong URL.
		if strings.Contains(opt.Addr, ",") {
			return Options{}, fmt.Errorf("one server, not %q: name several as redis+cluster:// or redis+sentinel://", opt.Addr)
		}
		// go-redis takes any number for the port, and a role retried dialing 127.0.0.1:99999
		// for ever as if Redis were down: the check the Sentinel and Cluster forms make.
		if _, err := addresses(opt.Addr, "6379"); err != nil {
			return Options{}, err
		}
		if u, err := url.Parse(s); err == nil && u.Query().Has("db") && strings.Trim(u.Path, "/") != "" {
			return Options{}, errTwoDatabases
		}
		// go-redis takes a negative database too, and then selects none: the URL's /-1 would
		// quietly share database 0 with whatever else lives there.
		if opt.DB < 0 {
			return Options{}, fmt.Errorf("database %d is negative", opt.DB)
		}
		return Options{Topology: Single, Single: opt}, nil
	case "sentinel", "cluster":
	default:
		return Options{}, unknownScheme(scheme)
	}

	authority, path, query, err := split(rest)
	if err != nil {
		return Options{}, err
	}
	userinfo, hosts := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	defaultPort := "6379"
	if topo == "sentinel" {
		defaultPort = "26379"
	}
	addrs, err := addresses(hosts, defaultPort)
	if err != nil {
		return Options{}, err
	}
	// The rest is go-redis's to read, from a URL in its own form: one address in the authority,
	// the others as addr=.
	for _, a := range addrs[1:] {
		query.Add("addr", a)
	}
	if topo == "cluster" {
		if path != "" && path != "0" || query.Has("db") {
			return Options{}, fmt.Errorf("a cluster has only database 0, not %q", path)
		}
		opt, err := redis.ParseClusterURL(base + "://" + userinfo + addrs[0] + "?" + query.Encode())
		if err != nil {
			return Options{}, err
		}
		// go-redis reads the slot map again every 60 s by default, and a failed-over primary
		// answers no MOVED while it is dead: a shard's campaigns were refused for a minute after
		// its replica had taken over. A CLUSTER SLOTS a second is nothing to the cluster.
		opt.ClusterStateReloadInterval = time.Second
		eachNodeByItsName(opt.TLSConfig)
		if opt.ReadOnly || opt.RouteByLatency || opt.RouteRandomly {
			return Options{}, errReplicaReads
		}
		return Options{Topology: Cluster, Cluster: opt}, nil
	}
	master, db, _ := strings.Cut(path, "/")
	if master == "" {
		return Options{}, errors.New("want the primary's name after the sentinels: redis+sentinel://s1:26379,s2:26379/<master>/<db>")
	}
	if db != "" {
		if query.Has("db") {
			return Options{}, errTwoDatabases
		}
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return Options{}, fmt.Errorf("database %q is not a number from 0", db)
		}
		query.Set("db", db)
	}
	query.Set("master_name", master)
	// go-redis's form gives the userinfo to the sentinels and takes the servers' from the query.
	if u, err := url.Parse("redis://" + userinfo + "x"); err != nil {
		return Options{}, errors.New("malformed user or password")
	} else if u.User != nil {
		query.Set("username", u.User.Username())
		if p, ok := u.User.Password(); ok {
			query.Set("password", p)
		}
	}
	sentinelUser := url.UserPassword(query.Get("sentinel_username"), query.Get("sentinel_password"))
	if !query.Has("sentinel_password") {
		sentinelUser = url.User(query.Get("sentinel_username"))
	}
	query.Del("sentinel_username")
	query.Del("sentinel_password")
	u := url.URL{Scheme: base, Host: addrs[0], RawQuery: query.Encode()}
	if sentinelUser.String() != "" {
		u.User = sentinelUser
	}
	opt, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return Options{}, err
	}
	if opt.ReplicaOnly || opt.RouteByLatency || opt.RouteRandomly {
		return Options{}, errReplicaReads
	}
	eachNodeByItsName(opt.TLSConfig)
	return Options{Topology: Sentinel, Sentinel: opt}, nil
}

// eachNodeByItsName has TLS check each server of a cluster or a Sentinel group against the
// name it is dialed by. go-redis puts the URL's first host in the ServerName of the one config
// it dials every node with: the nodes CLUSTER SLOTS names, the primary the sentinels name and
// the other sentinels, each with a certificate of its own, were all checked against the first
// host's name and refused. Without it, crypto/tls takes the name from the address dialed.
func eachNodeByItsName(cfg *tls.Config) {
	if cfg != nil {
		cfg.ServerName = ""
	}
}

// errTwoDatabases refuses a URL that names its database in the path and as db=, of which
// go-redis silently takes the option: redis://host/2?db=3 used database 3.
var errTwoDatabases = errors.New("the database is named twice, in the path and as db=: name it once, in the path")

// errReplicaReads refuses the options that send commands to replicas. A replica's reads lag
// its primary's writes (a reservation just made, a rebuild's frozen mark), which the
// compensator decides on; the scripts' writes fail there with READONLY; and go-redis's Sentinel
// client panics on route_by_latency and route_randomly when it is made.
var errReplicaReads = errors.New("read_only, replica_only, route_by_latency and route_randomly send commands to replicas, " +
	"whose reads lag the primary's writes: seckill reads and writes on the primaries only")

func unknownScheme(scheme string) error {
	return fmt.Errorf("unknown scheme %q: want redis://, rediss://, redis+sentinel:// or redis+cluster://", scheme)
}

// split cuts what follows "scheme://" into the authority, the path (without its slashes at
// either end) and the query.
func split(rest string) (authority, path string, query url.Values, err error) {
	rest, rawQuery, _ := strings.Cut(rest, "?")
	if query, err = url.ParseQuery(rawQuery); err != nil {
		return "", "", nil, fmt.Errorf("malformed query: %w", err)
	}
	authority, path, _ = strings.Cut(rest, "/")
	return authority, strings.Trim(path, "/"), query, nil
}

// addresses reads a comma-separated list of host:port, giving a bare host defaultPort.
func addresses(hosts, defaultPort string) ([]string, error) {
	if hosts == "" {
		return nil, errors.New("no host")
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				return nil, fmt.Errorf("address %q: %w", h, err)
			}
			host, port = strings.Trim(h, "[]"), defaultPort
		}
		if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("address %q: want host:port", h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

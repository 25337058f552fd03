package redisurl_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/lua/redisurl"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url      string
		topology redisurl.Topology
		addrs    []string
		master   string
		user     string
		password string
		db       int
		tls      bool
	}{
		{url: "redis://127.0.0.1:6379/0", topology: redisurl.Single, addrs: []string{"127.0.0.1:6379"}},
		{url: "rediss://u:p@r.example:6380/3", topology: redisurl.Single, addrs: []string{"r.example:6380"}, user: "u", password: "p", db: 3, tls: true},
		{url: "redis+sentinel://s1:26379,s2:26380/mymaster/2", topology: redisurl.Sentinel,
			addrs: []string{"s1:26379", "s2:26380"}, master: "mymaster", db: 2},
		{url: "redis+sentinel://:secret@s1,[::1]:1/mymaster", topology: redisurl.Sentinel,
			addrs: []string{"s1:26379", "[::1]:1"}, master: "mymaster", password: "secret"},
		{url: "rediss+sentinel://u:p%40ss@s1:26379/m/0?dial_timeout=3s", topology: redisurl.Sentinel,
			addrs: []string{"s1:26379"}, master: "m", user: "u", password: "p@ss", tls: true},
		{url: "redis+cluster://n1:7000,n2:7001,n3:7002", topology: redisurl.Cluster, addrs: []string{"n1:7000", "n2:7001", "n3:7002"}},
		{url: "redis+cluster://u:p@n1:7000/?pool_size=9", topology: redisurl.Cluster, addrs: []string{"n1:7000"}, user: "u", password: "p"},
		{url: "rediss+cluster://n1,n2/0", topology: redisurl.Cluster, addrs: []string{"n1:6379", "n2:6379"}, tls: true},
		{url: "redis+cluster://n1:7000?read_only=false", topology: redisurl.Cluster, addrs: []string{"n1:7000"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := redisurl.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if o.Topology != tc.topology {
				t.Fatalf("topology %s, want %s", o.Topology, tc.topology)
			}
			var (
				addrs              []string
				master, user, pass string
				db                 int
				tls                bool
			)
			switch o.Topology {
			case redisurl.Single:
				s := o.Single
				addrs, user, pass, db, tls = []string{s.Addr}, s.Username, s.Password, s.DB, s.TLSConfig != nil
			case redisurl.Sentinel:
				s := o.Sentinel
				addrs, master, user, pass, db, tls = s.SentinelAddrs, s.MasterName, s.Username, s.Password, s.DB, s.TLSConfig != nil
				if s.SentinelPassword != "" {
					t.Errorf("the servers' password went to the sentinels")
				}
			case redisurl.Cluster:
				c := o.Cluster
				addrs, user, pass, tls = c.Addrs, c.Username, c.Password, c.TLSConfig != nil
			}
			if !slices.Equal(addrs, tc.addrs) || master != tc.master || user != tc.user || pass != tc.password || db != tc.db || tls != tc.tls {
				t.Errorf("got addrs %v master %q user %q password %q db %d tls %v\nwant addrs %v master %q user %q password %q db %d tls %v",
					addrs, master, user, pass, db, tls, tc.addrs, tc.master, tc.user, tc.password, tc.db, tc.tls)
			}
		})
	}
}

func TestParseSentinelCredentials(t *testing.T) {
	o, err := redisurl.Parse("redis+sentinel://u:p@s1/m?sentinel_username=su&sentinel_password=sp")
	if err != nil {
		t.Fatal(err)
	}
	if s := o.Sentinel; s.Username != "u" || s.Password != "p" || s.SentinelUsername != "su" || s.SentinelPassword != "sp" {
		t.Errorf("servers %q/%q, sentinels %q/%q; want u/p, su/sp", s.Username, s.Password, s.SentinelUsername, s.SentinelPassword)
	}
}

// TestParseRefuses checks that every malformed URL is refused with ErrInvalid, which tells a
// configuration error from an outage, and that the refusal never repeats the password.
func TestParseRefuses(t *testing.T) {
	for _, url := range []string{
		"",
		"127.0.0.1:6379",
		"http://127.0.0.1:6379",
		"redis+foo://127.0.0.1:6379",
		"valkey+cluster://127.0.0.1:7000",
		"redis://u:hunter2@127.0.0.1:port/0",
		"redis://127.0.0.1:6379/zero",
		"redis://127.0.0.1:99999/0",
		"redis://127.0.0.1:0/0",
		"redis://127.0.0.1:-1/0",
		"redis://127.0.0.1:6379/0?bogus=1",
		"redis://n1:7000,n2:7001/0",
		"redis://n1,n2/0",
		"redis://127.0.0.1:6379/-1",
		"redis+sentinel://s1:26379/m/-1",
		"redis+cluster://",
		"redis+cluster://u:hunter2@n1:7000,,n2:7001",
		"redis+cluster://n1:7000,n2:99999",
		"redis+cluster://n1:7000/3",
		"redis+cluster://n1:7000?bogus=1",
		"redis+sentinel://s1:26379",
		"redis+sentinel://s1:26379/",
		"redis+sentinel://s1:26379/m/zero",
		"redis+sentinel://s1:x/m",
		"redis+sentinel://s1/m?bogus=1",
		"redis+sentinel://s1/m?%zz",
		// A '#' begins a fragment, which names nothing here: dropped, it made a master name
		// "mymaster#primary" that no sentinel knows, or cut a sentinel_password short.
		"redis://127.0.0.1:6379/1#primary",
		"redis+sentinel://s1/mymaster#primary",
		"redis+sentinel://s1,s2:26380/m/0?sentinel_password=a#b",
		"redis+cluster://n1:7000#x",
		// A database in the path and as db=: go-redis took the option's, silently.
		"redis://127.0.0.1:6379/2?db=3",
		"redis+sentinel://s1/m/2?db=3",
		"redis+cluster://n1:7000?db=3",
		// A password that holds '/', '?' or '#' unencoded ends the host early: what follows
		// it is read as the host, port or database, which the errors must not quote.
		"redis://u:hunter2/x@127.0.0.1:6379/0",
		"redis://u:1234/hunter2@127.0.0.1:6379/0",
		"redis://u:hunter2#x@127.0.0.1:6379/0",
		"redis+sentinel://u:hunter2/x@s1/m",
		"redis+cluster://u:hunter2?x@n1:7000",
		"redis+cluster://u:1234/hunter2@n1:7000",
		"redis+cluster://u:1234?hunter2@n1:7000",
		// Options that route commands to replicas: go-redis panics on the Sentinel form's
		// route_by_latency and route_randomly when the client is made, and a replica's reads
		// lag (a reservation just made, a rebuild's frozen mark), while replica_only sends the
		// scripts' writes where they fail with READONLY.
		"redis+sentinel://s1/m/0?route_by_latency=true",
		"redis+sentinel://s1/m/0?route_randomly=true",
		"redis+sentinel://s1/m/0?replica_only=true",
		"redis+cluster://n1:7000?read_only=true",
		"redis+cluster://n1:7000?route_by_latency=true",
		"redis+cluster://n1:7000?route_randomly=true",
	} {
		t.Run(url, func(t *testing.T) {
			_, err := redisurl.Parse(url)
			if !errors.Is(err, redisurl.ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestTLSChecksEachNodeByItsAddress: a cluster's nodes (as CLUSTER SLOTS names them) and a
// Sentinel group's primary (as the sentinels name it) are other hosts than the URL's first, and
// each has a certificate of its own. go-redis dials each with the parsed TLS config
// (tls.DialWithDialer); with the first host as its ServerName, every other node's certificate
// was checked against that host's name, and refused.
func TestTLSChecksEachNodeByItsAddress(t *testing.T) {
	node := httptest.NewUnstartedServer(http.NotFoundHandler())
	node.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes, said by the test
	node.StartTLS()                                   // a certificate for 127.0.0.1, ::1 and example.com
	defer node.Close()
	roots := x509.NewCertPool()
	roots.AddCert(node.Certificate())
	addr := node.Listener.Addr().String()
	for _, url := range []string{
		"rediss+cluster://seed.invalid:7000," + addr,
		"rediss+sentinel://seed.invalid:26379," + addr + "/primary/0",
	} {
		o, err := redisurl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		var cfg *tls.Config
		if o.Topology == redisurl.Sentinel {
			cfg = o.Sentinel.TLSConfig.Clone()
		} else {
			cfg = o.Cluster.TLSConfig.Clone()
		}
		cfg.RootCAs = roots // what an operator's CA is to the real nodes
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Errorf("%s: TLS to the node at %s: %v", strings.SplitN(url, ":", 2)[0], addr, err)
			continue
		}
		conn.Close()
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/redisurl"
	"github.com/seckill/seckill/redact"
	"github.com/seckill/seckill/store"
)

// usageError is a bad flag, argument or value. run prints it on stderr and exits 2, and no
// command has connected to anything by then: no retry mends a typo.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// flags is a flag set whose every flag falls back to SECKILL_<NAME> in the environment, but
// those it picks (pick).
type flags struct {
	*flag.FlagSet
	out        io.Writer       // where --help goes
	positional string          // the arguments the command reads after its flags (f.Args), for its usage line; "": none
	after      []func() error  // run by parse once the flags are set
	picks      map[string]bool // flags read from the command line only (pick)
	fromEnv    []string        // flags parse set from their variables, in order
	// reach are run by parse after every check of after: they read what is off the command
	// line (a running dev's addresses, --dev), so that a missing or bad flag is told first,
	// not "no seckill dev is running" and then, once it is, the flag.
	reach []func() error
}

// pick makes the named flags, which pick what a command changes (the orders it compensates,
// the campaign it cancels, by how much), read from the command line only: a SECKILL_CAMPAIGN
// exported for a few audits must not make a bare `seckill compensate` release and refund that
// campaign's every order.
func (f *flags) pick(names ...string) {
	if f.picks == nil {
		f.picks = map[string]bool{}
	}
	for _, n := range names {
		f.picks[n] = true
	}
}

// newFlags returns the flags of a command. Its help (f.Usage) goes to out; errors are returned
// by parse.
func newFlags(name, summary string, out io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, out: out}
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\n%s\n\nFlags (each read from the variable beside it when not given):\n", f.usageLine(), summary)
		// One line a flag, so that the api's thirty fit on a screen (the flag package's two
		// lines each made 67). Each flag's variable by name: the operator writing a
		// deployment's environment should not have to work out SECKILL_MAX_CONNS_PER_ADDR
		// from --max-conns-per-addr.
		fs.VisitAll(func(fl *flag.Flag) {
			name := "--" + fl.Name
			if fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "false" && fl.DefValue != "[]" {
				name += "=" + fl.DefValue
			}
			from := "(or " + envName(fl.Name) + ")"
			if f.picks[fl.Name] {
				from = "(command line only)"
			}
			fmt.Fprintf(out, "  %-26s %s %s\n", name, fl.Usage, from)
		})
	}
	return f
}

// usageLine is the first line of the command's --help, with the arguments it reads after its
// flags: an operator learns from it that dlq show wants a PARTITION/OFFSET.
func (f *flags) usageLine() string {
	return strings.TrimSpace("Usage: seckill " + f.Name() + " [flags] " + f.positional)
}

func envName(flag string) string {
	return "SECKILL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parse reads the arguments, then the environment for each flag they did not set, so a flag on
// the command line wins over its variable, and --help is help whatever the environment holds.
func (f *flags) parse(args []string) error {
	help := f.Usage
	f.Usage = func() {} // the flag package calls it on errors too
	err := f.Parse(args)
	f.Usage = help
	switch {
	case errors.Is(err, flag.ErrHelp):
		help()
		return err
	case err != nil:
		return usagef("%s (seckill %s --help lists the flags)", f.badValue(err), f.Name())
	case f.NArg() > 0 && f.positional == "":
		return usagef("unexpected arguments: %v", f.Args())
	}
	given := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.VisitAll(func(fl *flag.Flag) {
		if v, ok := os.LookupEnv(envName(fl.Name)); ok && !given[fl.Name] && !f.picks[fl.Name] && err == nil {
			if e := fl.Value.Set(v); e != nil {
				err = usagef("%s=%q: %s, as --%s", envName(fl.Name), v, wanted(fl, e), fl.Name)
			}
			f.fromEnv = append(f.fromEnv, fl.Name)
		}
	})
	if err != nil {
		return err
	}
	for _, fn := range append(slices.Clone(f.after), f.reach...) {
		if err := fn(); err != nil {
			return f.sourced(err)
		}
	}
	return nil
}

// usagef is a usage error that says which of the flags it names were set by a variable: the
// operator who wrote SECKILL_BATCH_SIZE=-1 into a manifest reads "--batch-size: want at least
// 1" and looks for the flag on a command line that has none.
func (f *flags) usagef(format string, args ...any) error {
	return f.sourced(usagef(format, args...))
}

func (f *flags) sourced(err error) error {
	var ue *usageError
	if !errors.As(err, &ue) {
		return err
	}
	msg := ue.msg
	for _, name := range f.fromEnv {
		// Once is enough: a check's own f.usagef has said it, or its message names the variable.
		if namesFlag(ue.msg, name) && !strings.Contains(ue.msg, envName(name)) {
			msg += fmt.Sprintf(" (--%s is %s from the environment)", name, envName(name))
		}
	}
	return &usageError{msg}
}

// namesFlag reports whether msg names the flag --name, not only one whose name it begins.
func namesFlag(msg, name string) bool {
	for rest := msg; ; {
		_, after, ok := strings.Cut(rest, "--"+name)
		if !ok {
			return false
		}
		if after == "" || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789-", rune(after[0])) {
			return true
		}
		rest = after
	}
}

// badValue is the flag package's err, reworded as a variable's is when it names a value a flag
// could not take: its own error for a number or a duration is only "parse error". The flag
// package returns no type for it, so its message is read; another message is left as it is.
func (f *flags) badValue(err error) string {
	m := badFlagValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	value, uerr := strconv.Unquote(m[1])
	fl := f.Lookup(m[2])
	if uerr != nil || fl == nil {
		return err.Error()
	}
	return fmt.Sprintf("--%s %q: %s", fl.Name, value, wanted(fl, errors.New(m[3])))
}

// badFlagValue is the flag package's error for a value Set refused: the quoted value, the
// flag's name and Set's error.
var badFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)

// wanted says what value fl takes, for a flag or a variable that did not parse: the flag
// package's own error for a number or a duration is only "parse error".
func wanted(fl *flag.Flag, err error) string {
	kind, _ := flag.UnquoteUsage(fl)
	switch kind {
	case "int", "uint":
		return "want a whole number"
	case "float":
		return "want a number"
	case "duration":
		return "want a duration such as 5s or 2m"
	case "": // a bool flag
		return "want true or false"
	}
	return err.Error()
}

// check adds a test of the flags' values to parse: ok reports whether they are sane, and want
// says what would be.
func (f *flags) check(ok func() bool, format string, args ...any) {
	f.after = append(f.after, func() error {
		if !ok() {
			return usagef(format, args...)
		}
		return nil
	})
}

// atLeast is an int flag whose value may not be below least.
func (f *flags) atLeast(name string, value, least int, usage string) *int {
	p := f.Int(name, value, usage)
	f.check(func() bool { return *p >= least }, "--%s: want at least %d", name, least)
	return p
}

// campaignID is a string flag that, when given, must name a campaign (events.ValidCampaignID):
// no store holds another, and the command connected only to answer campaign_not_found.
func (f *flags) campaignID(name, usage string) *string {
	p := f.String(name, "", usage)
	f.after = append(f.after, func() error {
		if *p != "" && !events.ValidCampaignID(*p) {
			return usagef("--%s %q: want 1 to 64 letters, digits, '-' and '_', starting with a letter or a digit (a campaign id)", name, *p)
		}
		return nil
	})
	return p
}

// orderID is a string flag that, when given, must be an order id (events.CampaignOf), for the
// reason of campaignID.
func (f *flags) orderID(name, usage string) *string {
	p := f.String(name, "", usage)
	f.after = append(f.after, func() error {
		if _, ok := events.CampaignOf(*p); *p != "" && !ok {
			return usagef("--%s %q: want CAMPAIGN.ID, an order id as the api gave it", name, *p)
		}
		return nil
	})
	return p
}

// duration is a duration flag that must be positive, or with zeroOK, not negative.
func (f *flags) duration(name string, value time.Duration, zeroOK bool, usage string) *time.Duration {
	p := f.Duration(name, value, usage)
	if zeroOK {
		f.check(func() bool { return *p >= 0 }, "--%s: want a duration of 0 or more", name)
	} else {
		f.check(func() bool { return *p > 0 }, "--%s: want a positive duration", name)
	}
	return p
}

// sessionTimeout is --session-timeout of a role that consumes in a group (role: what its
// members are called in the help).
func (f *flags) sessionTimeout(role string) *time.Duration {
	return f.duration("session-timeout", events.DefaultSessionTimeout, false, "how long the partitions of a "+role+" that died wait before the group hands them to the others; below 6s the brokers' group.min.session.timeout.ms must allow it (2s hands them on within 3s)")
}

// conn holds the flags of the three dependencies, shared by every command that needs them. A
// command has those of what it uses and no others, so that its --help lists only flags it
// reads; the others are nil.
type conn struct {
	redisURL, postgresURL, brokers, topicPrefix, logFormat *string
	redis                                                  *redisurl.Options // parsed from redisURL
}

// uses names what a command reaches, and so its connection flags (flags.conn).
type uses uint8

const (
	usesStore uses = 1 << iota // --postgres-url
	usesRedis                  // --redis-url
	usesKafka                  // --kafka-brokers and --topic-prefix
	usesLog                    // --log-format: the command logs
	usesAll   = usesStore | usesRedis | usesKafka | usesLog
)

func (f *flags) conn(u uses) conn {
	c := conn{redis: new(redisurl.Options)}
	var servers []string // the flags --dev stands in for
	if u&usesRedis != 0 {
		c.redisURL = f.String("redis-url", "redis://127.0.0.1:6379/0", "Redis: redis://[user:pass@]host:port/db (one server; rediss:// with TLS), redis+sentinel://[user:pass@]s1:26379,s2:26379/<master>/db (Sentinel) or redis+cluster://[user:pass@]n1:7000,n2:7001 (Cluster)")
		servers = append(servers, "--redis-url")
	}
	if u&usesStore != 0 {
		c.postgresURL = f.String("postgres-url", "postgres://seckill:seckill@127.0.0.1:5432/seckill?sslmode=disable", "order database URL: postgres://… or sqlite:PATH")
		servers = append(servers, "--postgres-url")
	}
	if u&usesKafka != 0 {
		c.brokers = f.String("kafka-brokers", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
		c.topicPrefix = f.String("topic-prefix", events.DefaultPrefix, "prefix of the topic names (<prefix>.orders.requested, …)")
		servers = append(servers, "--kafka-brokers")
	}
	if u&usesLog != 0 {
		c.logFormat = f.logFormat("json")
	}
	dev, dataDir := f.devFlags("reach the seckill dev (make run) running on --data-dir: its embedded servers, in place of " + andList(servers))
	// Without --dev the server flags are checked with the others; with it they are the dev's,
	// put in place (and checked) once every other check has passed, so a bad flag is told first.
	check := serverCheck(c.redisURL, c.postgresURL, c.brokers, c.redis)
	f.after = append(f.after, func() error {
		if *dev {
			return nil
		}
		return check()
	})
	f.reach = append(f.reach, func() error {
		if !*dev {
			return nil
		}
		// --dev stands in for these flags, so one given beside it is a contradiction: it
		// silently took the dev's place, and an audit meant for another store read the dev's.
		// Their variables yield to --dev, as one environment serves every command.
		if given := f.onCommandLine(servers...); len(given) > 0 {
			return usagef("--dev (SECKILL_DEV) reaches the dev's servers in place of %s: give one or the other", andList(given))
		}
		a, err := readDevAddrs(*dataDir)
		if err != nil {
			return err
		}
		set := func(p *string, v string) {
			if p != nil {
				*p = v
			}
		}
		set(c.redisURL, a.RedisURL)
		set(c.postgresURL, a.StoreURL)
		set(c.brokers, a.KafkaBrokers)
		return check()
	})
	if c.brokers == nil {
		return c
	}
	// Kafka refuses a topic name of other characters, or longer than 249 (INVALID_TOPIC_EXCEPTION),
	// and the api retried creating such topics for ever, as if Kafka were down.
	f.after = append(f.after, func() error {
		p := *c.topicPrefix
		longest := 249 - len(events.NewTopics("").Requested)
		if p == "" || len(p) > longest || strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
			return usagef("--topic-prefix %q: want 1 to %d letters, digits, '.', '_' or '-' (what Kafka allows in a topic name)", p, longest)
		}
		return nil
	})
	return c
}

// checkServers makes parse refuse a malformed server flag (exit 2): no retry mends it, while a
// role waits out a server that is down. A nil flag is one the command lacks; redis, when not
// nil, gets the parsed --redis-url.
func (f *flags) checkServers(redisURL, postgresURL, brokers *string, redis *redisurl.Options) {
	f.after = append(f.after, serverCheck(redisURL, postgresURL, brokers, redis))
}

// serverCheck is checkServers' check, for flags.conn to run on the dev's servers under --dev.
func serverCheck(redisURL, postgresURL, brokers *string, redis *redisurl.Options) func() error {
	return func() error {
		if redisURL != nil {
			o, err := redisurl.Parse(*redisURL)
			if err != nil {
				return usagef("--redis-url %s: %v", redact.URL(*redisURL), err)
			}
			if redis != nil {
				*redis = o
			}
		}
		if postgresURL != nil {
			if err := store.CheckURL(*postgresURL); err != nil {
				return usagef("--postgres-url %s: %v", redact.URL(*postgresURL), err)
			}
		}
		// franz-go takes a broker it cannot read ("http://kafka:9092") for a host name and
		// retries it for ever, as if Kafka were down.
		if brokers != nil {
			for _, b := range strings.Split(*brokers, ",") {
				if !validHostPort(b, false) {
					return usagef("--kafka-brokers: want host:port seed brokers, comma-separated (got %q)", b)
				}
			}
		}
		return nil
	}
}

// andList joins items as a sentence does: "a", "a and b", "a, b and c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// listenAddr is a host:port flag to listen on: a malformed one ends the command at once
// (exit 2), not once it has connected to everything and tries to listen.
func (f *flags) listenAddr(name, value, usage string) *string {
	p := f.String(name, value, usage)
	f.after = append(f.after, func() error {
		if !validHostPort(*p, true) {
			return usagef("--%s %q: want host:port to listen on, such as :8080 or 127.0.0.1:8080", name, *p)
		}
		return nil
	})
	return p
}

// validHostPort reports whether s is host:port with a port number. A broker may leave the port
// out (franz-go then dials 9092); a listen address may leave the host out and name its port as
// a service (:http).
func validHostPort(s string, listen bool) bool {
	if !listen && s != "" && !strings.ContainsAny(s, ":/ ") {
		return true
	}
	host, port, err := net.SplitHostPort(s)
	switch {
	case err != nil, !listen && host == "", strings.ContainsAny(host, "/ "):
		return false
	case listen:
		_, err := net.LookupPort("tcp", port)
		return err == nil
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 1<<16
}

// sameListenPort reports whether listening on a and on b (each valid for listenAddr) would take
// one port twice: the same port, on the same host or where either is every address. Port 0 (any
// free port) takes none.
func sameListenPort(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, erra := net.LookupPort("tcp", pa)
	nb, errb := net.LookupPort("tcp", pb)
	if erra != nil || errb != nil || na == 0 || na != nb {
		return false
	}
	every := func(h string) bool { ip := net.ParseIP(h); return h == "" || ip != nil && ip.IsUnspecified() }
	return ha == hb || every(ha) || every(hb)
}

// onCommandLine returns those of the flags names ("--redis-url") given on the command line,
// not by their variables.
func (f *flags) onCommandLine(names ...string) []string {
	var given []string
	for _, n := range names {
		f.Visit(func(fl *flag.Flag) {
			if "--"+fl.Name == n {
				given = append(given, n)
			}
		})
	}
	return given
}

// devFlags are --dev, which does what usage says with the seckill dev running on --data-dir,
// and --data-dir.
func (f *flags) devFlags(usage string) (dev *bool, dataDir *string) {
	return f.Bool("dev", false, usage), f.String("data-dir", devDataDir, "with --dev: the data directory of that seckill dev")
}

// devDataDir is where seckill dev keeps its state unless told otherwise.
const devDataDir = "./.seckill"

// devAddrs are the addresses of a running seckill dev's embedded servers, which it writes to
// its data directory so that operator commands can reach them (--dev).
type devAddrs struct {
	RedisURL     string `json:"redis_url"`
	StoreURL     string `json:"store_url"`
	KafkaBrokers string `json:"kafka_brokers"`
	// APIURL and AdminToken let seckill demo --dev drive the api, and JWTSecret, JWTIssuer and
	// JWTAudience let seckill token --dev mint its buyers' tokens; the file is the owner's only.
	APIURL      string `json:"api_url"`
	AdminToken  string `json:"admin_token"`
	JWTSecret   string `json:"jwt_secret"`
	JWTIssuer   string `json:"jwt_issuer,omitempty"`
	JWTAudience string `json:"jwt_audience,omitempty"`
}

// devAddrsFile is the file of devAddrs in a data directory.
func devAddrsFile(dataDir string) string { return filepath.Join(dataDir, "dev.json") }

func readDevAddrs(dataDir string) (devAddrs, error) {
	var a devAddrs
	b, err := os.ReadFile(devAddrsFile(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		if devRunning(dataDir) { // it writes dev.json once its start-up rebuild is done
			return a, fmt.Errorf("the seckill dev on %s is starting: try again once it prints its console link", dataDir)
		}
		return a, fmt.Errorf("no seckill dev is running on %s (start it with make run, or name its --data-dir)", dataDir)
	}
	if !devRunning(dataDir) {
		return a, fmt.Errorf("the seckill dev on %s is not running (its dev.json is left from one that was killed; start it with make run)", dataDir)
	}
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("%s: %w", devAddrsFile(dataDir), err)
	}
	return a, nil
}

func (c conn) topics() events.Topics { return events.NewTopics(*c.topicPrefix) }

func (c conn) brokerList() []string { return strings.Split(*c.brokers, ",") }

func (c conn) logger(out io.Writer) *slog.Logger { return newLogger(*c.logFormat, out) }

// logFormat is --log-format, json or text.
func (f *flags) logFormat(def string) *string {
	p := f.String("log-format", def, "log format: json or text")
	f.check(func() bool { return *p == "json" || *p == "text" }, "--log-format: want json or text")
	return p
}

func newLogger(format string, out io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(out, nil))
	}
	return slog.New(slog.NewJSONHandler(out, nil))
}

// logStart prints the configuration once, without secrets.
func (c conn) logStart(log *slog.Logger, role string, extra ...any) {
	args := []any{"role", role, "redis", redact.URL(*c.redisURL), "store", redact.URL(*c.postgresURL),
		"kafka", *c.brokers, "topics", *c.topicPrefix}
	log.Info("starting", append(args, extra...)...)
}

// openStore opens the store of a command that reads and writes orders: one whose schema lacks
// a migration of this build is an error that says to run seckill migrate.
func (c conn) openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, *c.postgresURL)
	if err != nil {
		return nil, err
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// openRedis connects to Redis and preloads the scripts.
func (c conn) openRedis(ctx context.Context) (*lua.Redis, error) {
	r := lua.New(c.redis.NewClient())
	if err := r.Load(ctx); err != nil {
		r.Close()
		// Named as the store's and Kafka's errors name theirs: "load scripts: dial tcp …"
		// alone did not say which of three servers was down.
		err = fmt.Errorf("open redis %s: %w", redact.URL(*c.redisURL), err)
		if redisRefused(err) {
			return nil, events.Permanent(err)
		}
		return nil, err
	}
	return r, nil
}

// redisRefused reports whether err is Redis turning us away for a reason no wait mends: a wrong
// password or user, a user without the permissions the scripts need, a database index the
// server does not have. A server loading its data or a read-only replica (a failover under way)
// is waited for. store.Open says the same of the store's refusals.
func redisRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM") ||
		strings.HasPrefix(msg, "ERR DB index is out of range")
}

// createTopics creates the topics unless they exist.
func createTopics(ctx context.Context, brokers []string, t events.Topics, partitions, replication int, log *slog.Logger) error {
	cl, err := events.NewClient(brokers)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := events.CreateTopics(ctx, adm, t, int32(partitions), int16(replication)); err != nil {
		return err
	}
	// Topics that were there already keep their settings: say what they lack, and go on.
	problems, err := events.CheckTopics(ctx, adm, t, int16(replication))
	for _, p := range problems {
		log.Warn("a topic is weaker than --replication asks: an acknowledged order may be lost with a broker", "problem", p)
	}
	// The check is advice: a managed Kafka whose ACLs let the api produce but not read topic
	// settings (DESCRIBE_CONFIGS) must not keep it from serving, as a refused create does not.
	if auth := (*kadm.AuthError)(nil); errors.As(err, &auth) {
		log.Warn("the topics' settings could not be read: check their replicas, min.insync.replicas and unclean.leader.election.enable by hand", "err", err)
		return nil
	}
	return err
}

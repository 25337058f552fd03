package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// Idempotency-Key follows the IETF httpapi draft "The Idempotency-Key HTTP Header Field" with
// Stripe's semantics. A purchase with a key:
//
//   - names an order whose id is derived from the campaign, the buyer and the key, so a retry
//     after a crash, a lost answer or an expired record reserves under the same id, and the
//     reserve script answers the first reservation instead of taking units twice;
//   - leaves a record in Redis, under the campaign's hash tag, with the request's fingerprint
//     and, once there is one, the answer: a retry with the same body gets the answer byte for
//     byte, with another body 422 idempotency_key_reused, and while the first request runs
//     409 idempotency_in_progress. Records live IdempotencyTTL (24 h by default).
//
// Only answers that follow a reservation are remembered (202, and the 503 of an order that was
// cancelled because it could not be queued): a refusal changed nothing, so a retry with the same
// key simply runs again.

// maxKeyLen bounds an Idempotency-Key, as Stripe does.
const maxKeyLen = 255

// idempotencyKey returns the request's Idempotency-Key, "" when it has none. The draft makes the
// value a structured-field string ("…"); a bare token is accepted too, as most clients send one.
func idempotencyKey(c echo.Context) (string, error) {
	vs := c.Request().Header.Values("Idempotency-Key")
	if len(vs) == 0 {
		return "", nil
	}
	k := vs[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if len(vs) > 1 || !validKey(k) {
		return "", events.Errorf(events.Invalid, "Idempotency-Key must be one header of 1 to %d printable ASCII characters", maxKeyLen)
	}
	return k, nil
}

func validKey(k string) bool {
	if k == "" || len(k) > maxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' || k[i] == '\\' {
			return false
		}
	}
	return true
}

// keyedIDPrefix starts every derived order id's random part: such an id has no time in it, and
// its 25 characters cannot be mistaken for an events.NewID (26), so events.IDTime refuses it.
const keyedIDPrefix = "k"

var keyedEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// keyedOrderID derives the order id of buyer's purchase in campaign under an Idempotency-Key:
// the campaign, a dot, "k" and 24 base32 characters (120 bits) of an HMAC of the three under
// secret, the deployment's: whoever guesses a buyer's key cannot compute the order's id.
func keyedOrderID(secret []byte, campaign, buyer, key string) string {
	m := hmac.New(sha256.New, secret)
	for _, part := range []string{campaign, buyer, key} {
		fmt.Fprintf(m, "%d:%s", len(part), part) // length-prefixed, so no two triples collide
	}
	return campaign + "." + keyedIDPrefix + keyedEncoding.EncodeToString(m.Sum(nil))[:24]
}

// orderIDSecret returns the key of derived order ids: cfg.OrderIDSecret; else one derived from
// the JWT secret, which every api of a deployment shares; else a random one, which only one
// api process may use (a keyed retry at another api, or after a restart, reserves anew).
func orderIDSecret(cfg Config) (secret []byte, random bool) {
	switch {
	case len(cfg.OrderIDSecret) > 0:
		return cfg.OrderIDSecret, false
	case len(cfg.JWTSecret) > 0:
		m := hmac.New(sha256.New, cfg.JWTSecret)
		m.Write([]byte("seckill order ids v1"))
		return m.Sum(nil), false
	}
	return []byte(rand.Text()), true
}

// idemRecord is the record of one Idempotency-Key.
type idemRecord struct {
	rdb     redis.Scripter
	key     string // the Redis key
	res     string // the campaign's reservation records (lua.Keys.Res)
	fp      string // the request's fingerprint
	orderID string
	owner   string // this request's id: only the holder of the lease finishes or aborts
	lease   time.Duration
	ttl     time.Duration
}

func (s *Server) idemRecord(campaign, buyer, key string, fingerprint []byte) *idemRecord {
	orderID := keyedOrderID(s.orderIDSecret, campaign, buyer, key)
	sum := sha256.Sum256(fingerprint)
	_, suffix, _ := strings.Cut(orderID, ".")
	return &idemRecord{
		rdb:     s.redis.Client(),
		key:     idemKey(campaign, suffix),
		res:     lua.KeysOf(campaign).Res,
		fp:      hex.EncodeToString(sum[:16]),
		orderID: orderID,
		owner:   events.NewID(),
		lease:   s.cfg.IdempotencyLease,
		ttl:     s.cfg.IdempotencyTTL,
	}
}

// idemKey is the Redis key of a record: under the hash tag of lua.KeysOf(campaign).
func idemKey(campaign, suffix string) string {
	return "seckill:{c:" + campaign + "}:idem:" + suffix
}

// idemState is what begin or peek found.
type idemState struct {
	outcome string // new, retry, done, busy, mismatch; peek: absent, stale
	status  int
	ctype   string
	body    []byte
	wait    time.Duration
}

func (r *idemRecord) begin(ctx context.Context, peek bool) (idemState, error) {
	op := "begin"
	if peek {
		op = "peek"
	}
	v, err := lua.Idempotency.Run(ctx, r.rdb, []string{r.key, r.res}, op, r.fp, r.lease.Milliseconds(), r.ttl.Milliseconds(), r.orderID, r.owner).Slice()
	if err != nil {
		return idemState{}, fmt.Errorf("idempotency record of %s: %w", r.orderID, err)
	}
	st := idemState{}
	st.outcome, _ = v[0].(string)
	switch st.outcome {
	case "done":
		if len(v) != 4 {
			return idemState{}, fmt.Errorf("idempotency record of %s: unexpected reply %v", r.orderID, v)
		}
		status, _ := v[1].(string)
		st.ctype, _ = v[2].(string)
		body, _ := v[3].(string)
		st.body = []byte(body)
		if st.status, err = strconv.Atoi(status); err != nil {
			return idemState{}, fmt.Errorf("idempotency record of %s: status %q", r.orderID, status)
		}
	case "busy":
		ms, _ := v[1].(int64)
		st.wait = time.Duration(ms) * time.Millisecond
	case "new", "retry", "mismatch", "absent", "stale":
	default:
		return idemState{}, fmt.Errorf("idempotency record of %s: unexpected reply %v", r.orderID, v)
	}
	return st, nil
}

// errLeaseLost is finish's and abort's error when a retry took the record over: this request
// outlived its lease, and the retry's answer is the one to remember.
var errLeaseLost = errors.New("the Idempotency-Key's lease passed to a retry")

// finish stores the answer, which every retry will get.
func (r *idemRecord) finish(ctx context.Context, status int, ctype string, body []byte) error {
	out, err := lua.Idempotency.Run(ctx, r.rdb, []string{r.key}, "finish", r.fp, status, ctype, body, r.owner).StringSlice()
	return r.held("store the answer", out, err)
}

// abort forgets a record that has no answer, so that a retry runs again.
func (r *idemRecord) abort(ctx context.Context) error {
	out, err := lua.Idempotency.Run(ctx, r.rdb, []string{r.key}, "abort", r.fp, r.owner).StringSlice()
	return r.held("forget the key", out, err)
}

// held turns finish's or abort's reply into its error.
func (r *idemRecord) held(what string, out []string, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s of %s: %w", what, r.orderID, err)
	case len(out) > 0 && out[0] == "lost":
		return fmt.Errorf("%s of %s: %w", what, r.orderID, errLeaseLost)
	}
	return nil
}

// replay answers with a stored answer.
func replay(c echo.Context, st idemState) error {
	c.Response().Header().Set("Idempotent-Replayed", "true")
	retryIfUnavailable(c, st.status)
	return c.Blob(st.status, st.ctype, st.body)
}

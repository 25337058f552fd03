package api_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
)

// signed returns a JWT of the claims, signed with method and key.
func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claims returns valid claims for sub, changed by the pairs given (a nil value deletes).
func claims(sub string, kv ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iss": testIssuer, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// state is what a refused request must leave as it was: every Redis key and value, and the
// store's row counts and sums.
func (h *harness) state(t *testing.T) string {
	t.Helper()
	var rows struct {
		Campaigns int64 `db:"campaigns"`
		Orders    int64 `db:"orders"`
		Purchases int64 `db:"purchases"`
		Sold      int64 `db:"sold"`
	}
	db := h.store.DB()
	if err := db.GetContext(context.Background(), &rows, `SELECT
		(SELECT COUNT(*) FROM campaigns) AS campaigns, (SELECT COUNT(*) FROM orders) AS orders,
		(SELECT COUNT(*) FROM purchases) AS purchases, (SELECT COALESCE(SUM(sold), 0) FROM campaigns) AS sold`); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s\nstore %+v", h.mr.Dump(), rows)
}

// TestMalformedRequests sends requests that can never succeed. Each gets its documented 4xx and
// error code, and leaves Redis and the store exactly as they were.
func TestMalformedRequests(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.InsecureUserHeader = false })
	h.createCampaign(t, `{"id": "m1", "name": "Malformed", "stock": 5, "per_user_limit": 2}`)
	alice := bearer(mustMint(t, "alice"))
	order := h.buyWith(t, "m1", alice, 1)
	secret := []byte(testSecret)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	nested := strings.Repeat("[", 2000) + "1" + strings.Repeat("]", 2000)
	tooDeep := strings.Repeat("[", 5000) + "1" + strings.Repeat("]", 5000)
	buy := func(body string, headers ...string) *http.Request {
		return request("POST", "/v1/campaigns/m1/purchases", body, append(slicesClone(alice), headers...)...)
	}
	buyAt := func(campaign string) *http.Request {
		return request("POST", "/v1/campaigns/"+url.PathEscape(campaign)+"/purchases", `{"quantity": 1}`, alice...)
	}
	buyAs := func(headers ...string) *http.Request {
		return request("POST", "/v1/campaigns/m1/purchases", `{"quantity": 1}`, headers...)
	}
	create := func(body string, headers ...string) *http.Request {
		return request("POST", "/v1/campaigns", body, append(h.bearer(), headers...)...)
	}
	getOrder := func(id string) *http.Request {
		return request("GET", "/v1/orders/"+url.PathEscape(id), "", alice...)
	}

	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		code   events.Code
	}{
		// Wrong types and numbers out of range.
		{"quantity as a string", buy(`{"quantity": "1"}`), 400, events.Invalid},
		{"quantity as a float", buy(`{"quantity": 1.5}`), 400, events.Invalid},
		{"quantity as a whole float", buy(`{"quantity": 1.0}`), 400, events.Invalid},
		{"quantity in exponent form", buy(`{"quantity": 1e0}`), 400, events.Invalid},
		{"quantity zero", buy(`{"quantity": 0}`), 400, events.Invalid},
		{"quantity negative", buy(`{"quantity": -1}`), 400, events.Invalid},
		{"quantity 2^63", buy(`{"quantity": 9223372036854775808}`), 400, events.Invalid},
		{"quantity 2^63-1", buy(fmt.Sprintf(`{"quantity": %d}`, int64(math.MaxInt64))), 400, events.Invalid},
		{"quantity -2^63", buy(fmt.Sprintf(`{"quantity": %d}`, int64(math.MinInt64))), 400, events.Invalid},
		{"quantity past 2^40", buy(`{"quantity": 1099511627777}`), 400, events.Invalid},
		{"quantity 1e400", buy(`{"quantity": 1e400}`), 400, events.Invalid},
		{"quantity over the per-user limit", buy(`{"quantity": 3}`), 400, events.Invalid},
		{"quantity null", buy(`{"quantity": null}`), 400, events.Invalid},
		{"quantity true", buy(`{"quantity": true}`), 400, events.Invalid},
		{"quantity in an array", buy(`{"quantity": [1]}`), 400, events.Invalid},
		{"quantity as an object", buy(`{"quantity": {"n": 1}}`), 400, events.Invalid},
		// Missing, unknown and extra data.
		{"no quantity", buy(`{}`), 400, events.Invalid},
		{"unknown field", buy(`{"quantity": 1, "coupon": "FREE"}`), 400, events.Invalid},
		{"user id in the body", buy(`{"quantity": 1, "user_id": "bob"}`), 400, events.Invalid},
		{"two objects", buy(`{"quantity": 1}{"quantity": 1}`), 400, events.Invalid},
		{"quantity in capitals", buy(`{"QUANTITY": 1}`), 400, events.Invalid},
		{"quantity twice", buy(`{"quantity": 1, "quantity": 2}`), 400, events.Invalid},
		{"quantity twice in two cases", buy(`{"quantity": 1, "Quantity": 2}`), 400, events.Invalid},
		{"a campaign's stock capitalised", create(`{"name": "x", "Stock": 5, "per_user_limit": 1}`), 400, events.Invalid},
		{"a stray brace after the object", buy(`{"quantity": 1}}`), 400, events.Invalid},
		{"a stray bracket after the object", buy(`{"quantity": 1} ]`), 400, events.Invalid},
		{"a campaign with a stray brace", create(`{"name": "x", "stock": 5, "per_user_limit": 1}}`), 400, events.Invalid},
		{"not JSON", buy(`quantity=1`), 400, events.Invalid},
		// JSON is UTF-8: encoding/json turned a byte that is not into U+FFFD without a word, so
		// a name, or a payment id, was stored as other text than was sent.
		{"a campaign's name not UTF-8", create("{\"name\": \"caf\xe9\", \"stock\": 5, \"per_user_limit\": 1}"), 400, events.Invalid},
		{"a purchase not UTF-8", buy("{\"quantity\": 1, \"\xff\": 1}"), 400, events.Invalid},
		{"truncated JSON", buy(`{"quantity":`), 400, events.Invalid},
		{"JSON array", buy(`[1]`), 400, events.Invalid},
		{"JSON string", buy(`"buy"`), 400, events.Invalid},
		{"JSON null", buy(`null`), 400, events.Invalid},
		{"empty body", request("POST", "/v1/campaigns/m1/purchases", "", alice...), 400, events.Invalid},
		{"deeply nested body", buy(`{"quantity": ` + nested + `}`), 400, events.Invalid},
		// Size and media type.
		{"nested past the size cap", buy(`{"quantity": ` + tooDeep + `}`), 413, events.BodyTooLarge},
		{"oversized body", buy(`{"quantity": 1` + strings.Repeat(" ", 9000) + `}`), 413, events.BodyTooLarge},
		{"text/plain body", buy(`{"quantity": 1}`, "Content-Type", "text/plain"), 415, events.UnsupportedMediaType},
		{"form body", buy(`quantity=1`, "Content-Type", "application/x-www-form-urlencoded"), 415, events.UnsupportedMediaType},
		{"empty Content-Type", buy(`{"quantity": 1}`, "Content-Type", ""), 415, events.UnsupportedMediaType},
		{"JSON in latin1", buy(`{"quantity": 1}`, "Content-Type", "application/json; charset=iso-8859-1"), 415, events.UnsupportedMediaType},
		{"malformed Content-Type", buy(`{"quantity": 1}`, "Content-Type", "application/json; ;;"), 415, events.UnsupportedMediaType},
		// Ids with Lua and SQL in them.
		{"Lua in a campaign id", buyAt(`m1') redis.call('FLUSHALL') --`), 404, events.CampaignNotFound},
		{"SQL in a campaign id", buyAt(`m1' OR '1'='1`), 404, events.CampaignNotFound},
		{"hash tag in a campaign id", buyAt(`m1}:x{`), 404, events.CampaignNotFound},
		{"campaign id too long", buyAt(strings.Repeat("m", 65)), 404, events.CampaignNotFound},
		{"campaign id with a dot", buyAt("m1.x"), 404, events.CampaignNotFound},
		{"campaign id not ASCII", buyAt("m1é"), 404, events.CampaignNotFound},
		{"SQL in an order id", getOrder(`m1.x' OR '1'='1`), 404, events.OrderNotFound},
		{"Lua in an order id", getOrder(`m1.x') redis.call('FLUSHALL') --`), 404, events.OrderNotFound},
		{"order id without a campaign", getOrder("nodot"), 404, events.OrderNotFound},
		// Idempotency keys.
		{"Idempotency-Key too long", buy(`{"quantity": 1}`, "Idempotency-Key", strings.Repeat("k", 256)), 400, events.Invalid},
		{"Idempotency-Key not ASCII", buy(`{"quantity": 1}`, "Idempotency-Key", "ключ"), 400, events.Invalid},
		{"Idempotency-Key with a control character", buy(`{"quantity": 1}`, "Idempotency-Key", "a\x01b"), 400, events.Invalid},
		{"Idempotency-Key empty quoted", buy(`{"quantity": 1}`, "Idempotency-Key", `""`), 400, events.Invalid},
		// Identity.
		{"no token", buyAs(), 401, events.Unauthorized},
		{"X-User-ID without the insecure setting", buyAs("X-User-ID", "alice"), 401, events.Unauthorized},
		{"Basic credentials", buyAs("Authorization", "Basic YWxpY2U6cHc="), 401, events.Unauthorized},
		{"Bearer with no token", buyAs("Authorization", "Bearer "), 401, events.Unauthorized},
		{"garbage token", buyAs(bearer("not.a.jwt")...), 401, events.Unauthorized},
		{"expired token", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "exp", time.Now().Add(-time.Minute).Unix())))...), 401, events.Unauthorized},
		{"forged token", buyAs(bearer(signed(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes"), claims("alice")))...), 401, events.Unauthorized},
		{"alg none", buyAs(bearer(signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("alice")))...), 401, events.Unauthorized},
		{"alg HS512", buyAs(bearer(signed(t, jwt.SigningMethodHS512, secret, claims("alice")))...), 401, events.Unauthorized},
		{"alg RS256", buyAs(bearer(signed(t, jwt.SigningMethodRS256, rsaKey, claims("alice")))...), 401, events.Unauthorized},
		{"no exp", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "exp", nil)))...), 401, events.Unauthorized},
		{"another issuer", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "iss", "evil")))...), 401, events.Unauthorized},
		{"not valid yet", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "nbf", time.Now().Add(time.Hour).Unix())))...), 401, events.Unauthorized},
		{"no sub", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "sub", nil)))...), 401, events.Unauthorized},
		{"sub with a newline", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("ali\nce")))...), 401, events.Unauthorized},
		{"sub too long", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims(strings.Repeat("a", 129))))...), 401, events.Unauthorized},
		{"sub not a string", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "sub", 42)))...), 401, events.Unauthorized},
		{"token too long", buyAs(bearer(signed(t, jwt.SigningMethodHS256, secret, claims("alice", "pad", strings.Repeat("x", 5000))))...), 401, events.Unauthorized},
		{"admin token as a buyer", buyAs(h.bearer()...), 401, events.Unauthorized},
		{"another buyer's order", request("GET", "/v1/orders/"+order, "", bearer(mustMint(t, "bob"))...), 404, events.OrderNotFound},
		{"another buyer's order events", request("GET", "/v1/orders/"+order+"/events", "", bearer(mustMint(t, "bob"))...), 404, events.OrderNotFound},
		// Campaign creation.
		{"stock as a float", create(`{"name": "x", "stock": 1.5, "per_user_limit": 1}`), 400, events.Invalid},
		{"stock 2^63", create(`{"name": "x", "stock": 9223372036854775808, "per_user_limit": 1}`), 400, events.Invalid},
		{"stock past 2^40", create(`{"name": "x", "stock": 1099511627777, "per_user_limit": 1}`), 400, events.Invalid},
		{"stock as a string", create(`{"name": "x", "stock": "5", "per_user_limit": 1}`), 400, events.Invalid},
		{"negative limit", create(`{"name": "x", "stock": 5, "per_user_limit": -1}`), 400, events.Invalid},
		{"Lua in a new campaign id", create(`{"id": "x') redis.call('FLUSHALL') --", "name": "x", "stock": 5, "per_user_limit": 1}`), 400, events.Invalid},
		{"start that is no date", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "tomorrow"}`), 400, events.Invalid},
		{"end in 1965", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "1960-01-01T00:00:00Z", "ends_at": "1965-01-01T00:00:00Z"}`), 400, events.Invalid},
		{"start at the epoch", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "1970-01-01T00:00:00Z"}`), 400, events.Invalid},
		{"end at the epoch", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "ends_at": "1970-01-01T00:00:00Z"}`), 400, events.Invalid},
		{"start before 1970", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "1969-12-31T23:59:59.999Z"}`), 400, events.Invalid},
		{"window under a millisecond", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "2030-01-01T00:00:00.0001Z", "ends_at": "2030-01-01T00:00:00.0009Z"}`), 400, events.Invalid},
		{"end before start", create(`{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}`), 400, events.Invalid},
		{"NUL in the name", create(`{"name": "a\u0000b", "stock": 5, "per_user_limit": 1}`), 400, events.Invalid},
		{"newline in the name", create(`{"name": "a\nb", "stock": 5, "per_user_limit": 1}`), 400, events.Invalid},
		{"name too long", create(`{"name": "` + strings.Repeat("n", 201) + `", "stock": 5, "per_user_limit": 1}`), 400, events.Invalid},
		{"campaign as text", create(`{"name": "x", "stock": 5, "per_user_limit": 1}`, "Content-Type", "text/plain"), 415, events.UnsupportedMediaType},
		{"campaign by a buyer", request("POST", "/v1/campaigns", `{"name": "x", "stock": 5, "per_user_limit": 1}`, alice...), 401, events.Unauthorized},
		{"compensation by a buyer", request("POST", "/v1/admin/orders/"+order+"/compensate", "", alice...), 401, events.Unauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.state(t)
			h.fail(t, tc.req, tc.status, tc.code)
			if after := h.state(t); after != before {
				t.Errorf("the request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// mustMint mints a token the harness accepts.
func mustMint(t *testing.T, user string) string {
	t.Helper()
	tok, err := api.MintToken([]byte(testSecret), testIssuer, "", user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// buyWith purchases with the given credentials and returns the order id.
func (h *harness) buyWith(t *testing.T, campaign string, headers []string, qty int) string {
	t.Helper()
	m := h.do(t, request("POST", "/v1/campaigns/"+campaign+"/purchases", fmt.Sprintf(`{"quantity": %d}`, qty), headers...), http.StatusAccepted)
	id, _ := m["order_id"].(string)
	if id == "" {
		t.Fatalf("purchase answered no order id: %v", m)
	}
	return id
}

// TestAdminRoutesTakeOnlyTheAdminToken tries every admin route the server has (a new one
// included) with every way a careless or hostile client might present, or guess at, a
// credential: each is 401 and leaves Redis and the store as they were. The admin token is taken
// from the Authorization header only, never from a query string (which lands in access logs and
// Referer headers) or a cookie (which a browser sends on another site's behalf). The payment
// service's token opens the payment route alone.
func TestAdminRoutesTakeOnlyTheAdminToken(t *testing.T) {
	const paymentToken = "payment-service-token-0123456789abcdef"
	h := newHarness(t, func(c *api.Config) { c.PaymentToken = paymentToken })
	h.createCampaign(t, `{"id": "adm", "name": "Admin only", "stock": 5, "per_user_limit": 2}`)
	order := h.buy(t, "adm", "alice", 1)
	// Bodies a real admin's call of each route would have, so that one let through would act.
	bodies := map[string]string{
		"POST /v1/campaigns":                      `{"id": "sneaky", "name": "x", "stock": 1, "per_user_limit": 1}`,
		"POST /v1/admin/campaigns/:id/extend":     `{"ends_at": "2099-01-01T00:00:00Z"}`,
		"POST /v1/admin/campaigns/:id/stock":      `{"add": 1}`,
		"POST /v1/admin/orders/:id/payment":       `{"payment_id": "p1"}`,
		"POST /v1/admin/campaigns/:id/compensate": `{"status": "pending"}`,
	}
	credentials := map[string][]string{
		"no credential":              nil,
		"a wrong token":              bearer("wrong-" + h.admin),
		"a buyer's token":            bearer(mustMint(t, "alice")),
		"a buyer's header":           user("alice"),
		"the token without Bearer":   {"Authorization", h.admin},
		"the token as Basic":         {"Authorization", "Basic " + h.admin},
		"the token in a cookie":      {"Cookie", "token=" + h.admin + "; admin_token=" + h.admin},
		"the token in X-Admin-Token": {"X-Admin-Token", h.admin},
	}
	for _, r := range h.adminRoutes(t) {
		method, path, _ := strings.Cut(r, " ")
		target := strings.Replace(path, ":id", "adm", 1)
		if strings.HasPrefix(path, "/v1/admin/orders/") {
			target = strings.Replace(path, ":id", order, 1)
		}
		try := func(name, target string, headers []string) {
			t.Run(r+" with "+name, func(t *testing.T) {
				// Bounded: a stream let through would otherwise never end.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				before := h.state(t)
				h.fail(t, request(method, target, bodies[r], headers...).WithContext(ctx), http.StatusUnauthorized, events.Unauthorized)
				if after := h.state(t); after != before {
					t.Errorf("the request changed the state:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
		for name, headers := range credentials {
			try(name, target, headers)
		}
		// The payment service's token records payments and nothing else.
		if r != "POST /v1/admin/orders/:id/payment" {
			try("the payment token", target, bearer(paymentToken))
		}
		for _, param := range []string{"token", "access_token", "admin_token"} {
			try("the token as ?"+param, target+"?"+param+"="+url.QueryEscape(h.admin), nil)
		}
	}
}

// TestTimesSayWhatTheyMustBe: a time that is no RFC 3339 string is a well-formed JSON body
// with a bad value; it was answered "malformed JSON body", which sent the admin looking for a
// syntax error.
func TestTimesSayWhatTheyMustBe(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "tm", "name": "Times", "stock": 5, "per_user_limit": 1}`)
	for _, r := range []*http.Request{
		request("POST", "/v1/campaigns", `{"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "tomorrow"}`, h.bearer()...),
		request("POST", "/v1/campaigns", `{"name": "x", "stock": 5, "per_user_limit": 1, "ends_at": "2030-13-01T00:00:00Z"}`, h.bearer()...),
		request("POST", "/v1/admin/campaigns/tm/extend", `{"ends_at": 1893456000}`, h.bearer()...),
	} {
		m := h.do(t, r, http.StatusBadRequest)
		e, _ := m["error"].(map[string]any)
		if msg, _ := e["message"].(string); !strings.Contains(msg, "RFC 3339") {
			t.Errorf("%s %s: answered %v; want it to say a time must be RFC 3339", r.Method, r.URL, m)
		}
	}
}

// TestAPastEndWithoutAStartSaysSo: a campaign sent with an ends_at already past and no
// starts_at was refused "ends_at must be at least a millisecond after starts_at", naming a
// field the admin never sent (the sale starts when it is created); extend says "in the future".
func TestAPastEndWithoutAStartSaysSo(t *testing.T) {
	h := newHarness(t)
	m := h.do(t, request("POST", "/v1/campaigns", `{"name": "x", "stock": 5, "per_user_limit": 1, "ends_at": "2020-01-01T00:00:00Z"}`, h.bearer()...), http.StatusBadRequest)
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); e["code"] != string(events.Invalid) || !strings.Contains(msg, "ends_at must be in the future") {
		t.Errorf("a past end without a start: answered %v; want invalid_request saying ends_at must be in the future", m)
	}
}

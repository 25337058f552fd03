package api

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/events"
)

// The verifier is held to golang-jwt with the options the api used before it had its own: the
// oracle below is the old verifier.user without its cache.

var (
	tokSecret = []byte("token-test-secret-of-32-bytes-or-more")
	tokNow    = time.Unix(1_800_000_000, 0)
)

const tokIssuer = "shop"

// oracleUser is verifier.user as it was on golang-jwt. panicked reports a panic of the parser,
// which the api's recover middleware turned into a 503.
func oracleUser(issuer string, now time.Time, raw string) (user string, err error, panicked bool) {
	defer func() {
		if recover() != nil {
			user, err, panicked = "", errors.New("panic"), true
		}
	}()
	if len(raw) > maxTokenLen {
		return "", events.Errorf(events.Unauthorized, "bearer token longer than %d bytes", maxTokenLen), false
	}
	var claims jwt.RegisteredClaims
	_, err = oracleParser(issuer, now).ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return tokSecret, nil })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", events.Errorf(events.Unauthorized, "the bearer token has expired"), false
	case err != nil:
		return "", events.Errorf(events.Unauthorized, "invalid bearer token"), false
	case !ValidUser(claims.Subject):
		return "", events.Errorf(events.Unauthorized, "the bearer token's sub is not a valid user id"), false
	}
	return claims.Subject, nil, false
}

func oracleParser(issuer string, now time.Time) *jwt.Parser {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(tokenLeeway),
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	return jwt.NewParser(opts...)
}

func testVerifier(issuer string, now time.Time) *verifier {
	v := newVerifier(tokSecret, issuer)
	v.now = func() time.Time { return now }
	return v
}

// stricter reports whether raw is one of the tokens the verifier refuses on purpose while
// golang-jwt may take it: a header with crit, a non-string typ, or alg or typ twice; a registered
// claim named twice (names compared as encoding/json does).
func stricter(raw string) bool {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return false
	}
	hdr, err1 := b64.DecodeString(parts[0])
	payload, err2 := b64.DecodeString(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	counts := map[string]int{}
	strictHeader := false
	members(hdr, func(k string, v json.RawMessage) {
		counts[k]++
		if k == "crit" || k == "typ" && v[0] != '"' {
			strictHeader = true
		}
	})
	if strictHeader || counts["alg"] > 1 || counts["typ"] > 1 {
		return true
	}
	clear(counts)
	members(payload, func(k string, _ json.RawMessage) {
		for _, name := range claimNames {
			if strings.EqualFold(k, name) {
				counts[name]++
			}
		}
	})
	for _, n := range counts {
		if n > 1 {
			return true
		}
	}
	return false
}

// members calls f with each member of the JSON object b, as encoding/json reads them.
func members(b []byte, f func(k string, v json.RawMessage)) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return
		}
		f(k.(string), v)
	}
}

// checkToken holds the verifier to the oracle on raw.
func checkToken(t *testing.T, issuer string, now time.Time, raw string) {
	t.Helper()
	got, gotErr := testVerifier(issuer, now).user(raw)
	want, wantErr, panicked := oracleUser(issuer, now, raw)
	if panicked || stricter(raw) {
		if gotErr == nil {
			t.Fatalf("%q (issuer %q): verifier takes %q; want it refused (golang-jwt: %q, %v, panicked %v)", raw, issuer, got, want, wantErr, panicked)
		}
		return
	}
	if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%q (issuer %q): verifier %q, %v; golang-jwt %q, %v", raw, issuer, got, gotErr, want, wantErr)
	}
}

var b64Enc = base64.RawURLEncoding

// signSegments returns "h.p.sig" for the encoded segments h.p, signed with the test secret.
func signSegments(hp string) string {
	mac := hmac.New(sha256.New, tokSecret)
	mac.Write([]byte(hp))
	return hp + "." + b64Enc.EncodeToString(mac.Sum(nil))
}

// signJSON encodes header and claims and signs them.
func signJSON(header, claims string) string {
	return signSegments(b64Enc.EncodeToString([]byte(header)) + "." + b64Enc.EncodeToString([]byte(claims)))
}

const stdHeader = `{"alg":"HS256","typ":"JWT"}`

// claimsWith returns valid claims (sub alice, iss shop, exp an hour after tokNow) with extra
// members appended; extra may name them again.
func claimsWith(extra string) string {
	c := fmt.Sprintf(`{"sub":"alice","iss":"shop","exp":%d,"iat":%d`, tokNow.Add(time.Hour).Unix(), tokNow.Unix())
	if extra != "" {
		c += "," + extra
	}
	return c + "}"
}

func TestVerifierRules(t *testing.T) {
	exp := func(d time.Duration) string { return fmt.Sprint(tokNow.Add(d).Unix()) }
	good := signJSON(stdHeader, claimsWith(""))
	minted, err := MintToken(tokSecret, tokIssuer, "alice", time.Hour, tokNow)
	if err != nil {
		t.Fatal(err)
	}
	otherSecret, _ := MintToken([]byte("another-secret-of-at-least-32-bytes"), tokIssuer, "alice", time.Hour, tokNow)
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{"sub": "alice", "exp": tokNow.Add(time.Hour).Unix()}).SignedString(tokSecret)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": tokNow.Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hdr, payload, _ := strings.Cut(good, ".")
	payload, sig, _ := strings.Cut(payload, ".")
	// The last character of a 32-byte signature carries 4 bits; flipping one of the 2 unused
	// ones keeps the bytes and breaks strict decoding.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", sig[len(sig)-1])
	strayBits := sig[:len(sig)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last^1])

	const (
		ok        = ""
		invalid   = "invalid bearer token"
		expired   = "the bearer token has expired"
		badSub    = "the bearer token's sub is not a valid user id"
		tooLong   = "bearer token longer than 4096 bytes"
		anyIssuer = "" // the issuer setting: none
	)
	for _, tc := range []struct {
		name, issuer, raw, want string
	}{
		{"minted", tokIssuer, minted, ok},
		{"minted, no issuer configured", anyIssuer, minted, ok},
		{"hand-made", tokIssuer, good, ok},
		{"two segments", tokIssuer, hdr + "." + payload, invalid},
		{"four segments", tokIssuer, good + ".x", invalid},
		{"empty", tokIssuer, "", invalid},
		{"padded header", tokIssuer, signSegments(hdr + "=." + payload), invalid},
		{"padded signature", tokIssuer, good + "=", invalid},
		{"stray bits in the signature", tokIssuer, hdr + "." + payload + "." + strayBits, invalid},
		{"standard base64 alphabet", tokIssuer, signJSON(`{"alg":"HS256","x":"??>"}`, claimsWith("")), ok},
		{"bad signature", tokIssuer, good[:len(good)-3] + "AAA", invalid},
		{"short signature", tokIssuer, good[:len(good)-4], invalid},
		{"no signature", tokIssuer, hdr + "." + payload + ".", invalid},
		{"another secret", tokIssuer, otherSecret, invalid},
		{"alg none", anyIssuer, none, invalid},
		{"alg HS512", anyIssuer, hs512, invalid},
		{"alg hs256", tokIssuer, signJSON(`{"alg":"hs256"}`, claimsWith("")), invalid},
		{"alg escaped", tokIssuer, signJSON(`{"alg":"HS\u0032\u0035\u0036"}`, claimsWith("")), ok},
		{"no alg", tokIssuer, signJSON(`{"typ":"JWT"}`, claimsWith("")), invalid},
		{"alg a number", tokIssuer, signJSON(`{"alg":256}`, claimsWith("")), invalid},
		{"alg null", tokIssuer, signJSON(`{"alg":null}`, claimsWith("")), invalid},
		{"Alg", tokIssuer, signJSON(`{"Alg":"HS256"}`, claimsWith("")), invalid},
		{"alg twice", tokIssuer, signJSON(`{"alg":"HS256","alg":"HS256"}`, claimsWith("")), invalid},
		{"header members of every kind", tokIssuer, signJSON(` {"alg":"HS256","kid":"k1","jwk":{"k":[1,2.5e3,true,false,null,{}]},"x":[]} `, claimsWith("")), ok},
		{"typ a number", tokIssuer, signJSON(`{"alg":"HS256","typ":5}`, claimsWith("")), invalid},
		{"typ null", tokIssuer, signJSON(`{"alg":"HS256","typ":null}`, claimsWith("")), invalid},
		{"crit", tokIssuer, signJSON(`{"alg":"HS256","crit":["exp"]}`, claimsWith("")), invalid},
		{"header an array", tokIssuer, signJSON(`["alg","HS256"]`, claimsWith("")), invalid},
		{"header null", tokIssuer, signJSON(`null`, claimsWith("")), invalid},
		{"header with trailing data", tokIssuer, signJSON(stdHeader+"{}", claimsWith("")), invalid},
		{"header not JSON", tokIssuer, signJSON(`{"alg":"HS256",}`, claimsWith("")), invalid},
		{"claims null", tokIssuer, signJSON(stdHeader, `null`), invalid},
		{"claims an array", tokIssuer, signJSON(stdHeader, `[]`), invalid},
		{"claims with trailing data", tokIssuer, signJSON(stdHeader, claimsWith("")+" x"), invalid},
		{"claims twice", tokIssuer, signJSON(stdHeader, claimsWith("")+claimsWith("")), invalid},
		{"claims with white space", tokIssuer, signJSON(stdHeader, "\r\n\t "+claimsWith("")+" \n"), ok},
		{"no exp", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop"}`), invalid},
		{"exp null", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":null}`), invalid},
		{"expired", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(-time.Minute)+`}`), expired},
		{"expired within the leeway", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(-4*time.Second)+`}`), ok},
		{"expired by the leeway exactly", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(-5*time.Second)+`}`), expired},
		{"exp a string", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":"`+exp(time.Hour)+`"}`), ok},
		{"exp a string of no number", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":"soon"}`), invalid},
		{"exp a string with space", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":" `+exp(time.Hour)+`"}`), invalid},
		{"exp true", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":true}`), invalid},
		{"exp an object", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":{}}`), invalid},
		{"exp out of range", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":1e400}`), invalid},
		{"exp huge", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":1e300}`), expired},
		{"exp with a fraction and exponent", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":18000036.005e2}`), ok},
		{"exp negative", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":-1.5}`), expired},
		{"exp 01", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":01}`), invalid},
		{"EXP", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","EXP":`+exp(time.Hour)+`}`), ok},
		{"exp twice", tokIssuer, signJSON(stdHeader, claimsWith(`"Exp":`+exp(time.Hour))), invalid},
		{"nbf ahead", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(time.Minute))), invalid},
		{"nbf within the leeway", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(5*time.Second))), ok},
		{"nbf just beyond the leeway", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(6*time.Second))), invalid},
		{"nbf past", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(-time.Hour))), ok},
		{"nbf null", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":null`)), ok},
		{"nbf a string", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":"x"`)), invalid},
		{"iat a string", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(time.Hour)+`,"iat":"x"}`), invalid},
		{"iat ahead", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(time.Hour)+`,"iat":`+exp(time.Minute)+`}`), ok},
		{"no iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","exp":`+exp(time.Hour)+`}`), invalid},
		{"no iss, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","exp":`+exp(time.Hour)+`}`), ok},
		{"another iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(time.Hour)+`}`), invalid},
		{"another iss, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(time.Hour)+`}`), ok},
		{"iss a number, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","iss":5,"exp":`+exp(time.Hour)+`}`), invalid},
		{"iss null", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":null,"exp":`+exp(time.Hour)+`}`), invalid},
		{"iss escaped", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"sh\u006fp","exp":`+exp(time.Hour)+`}`), ok},
		{"expired and another iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(-time.Hour)+`}`), expired},
		{"expired and not yet valid", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(-time.Hour)+`,"nbf":`+exp(time.Hour)+`}`), expired},
		{"expired and no sub", tokIssuer, signJSON(stdHeader, `{"iss":"shop","exp":`+exp(-time.Hour)+`}`), expired},
		{"no sub", tokIssuer, signJSON(stdHeader, `{"iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub null", tokIssuer, signJSON(stdHeader, `{"sub":null,"iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub a number", tokIssuer, signJSON(stdHeader, `{"sub":42,"iss":"shop","exp":`+exp(time.Hour)+`}`), invalid},
		{"sub with a newline", tokIssuer, signJSON(stdHeader, `{"sub":"ali\nce","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub too long", tokIssuer, signJSON(stdHeader, `{"sub":"`+strings.Repeat("a", 129)+`","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub escaped", tokIssuer, signJSON(stdHeader, `{"sub":"\u0061lice \ud83d\ude00 \"q\"","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub with a lone surrogate", tokIssuer, signJSON(stdHeader, `{"sub":"a\ud83d","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub with invalid UTF-8", tokIssuer, signJSON(stdHeader, "{\"sub\":\"a\xff\xe2\x82\",\"iss\":\"shop\",\"exp\":"+exp(time.Hour)+"}"), ok},
		{"sub with a raw control character", tokIssuer, signJSON(stdHeader, "{\"sub\":\"a\x01\",\"iss\":\"shop\",\"exp\":"+exp(time.Hour)+"}"), invalid},
		{"SUB", tokIssuer, signJSON(stdHeader, `{"SUB":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"ſub folds to sub", tokIssuer, signJSON(stdHeader, `{"ſub":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub escaped in its name", tokIssuer, signJSON(stdHeader, `{"\u0073ub":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub twice", tokIssuer, signJSON(stdHeader, claimsWith(`"sub":"bob"`)), invalid},
		{"jti", tokIssuer, signJSON(stdHeader, claimsWith(`"jti":"j1"`)), ok},
		{"jti a number", tokIssuer, signJSON(stdHeader, claimsWith(`"jti":1`)), invalid},
		{"aud a string", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":"a"`)), ok},
		{"aud strings", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":["a", "b"]`)), ok},
		{"aud empty", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":[]`)), ok},
		{"aud null", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":null`)), ok},
		{"aud with null", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":["a",null]`)), invalid},
		{"aud a number", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":1`)), invalid},
		{"aud nested", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":[["a"]]`)), invalid},
		{"other claims of every kind", tokIssuer, signJSON(stdHeader, claimsWith(`"x":{"y":[1,-0.5E-3,"s\/",true,false,null]},"":0,"subject":1`)), ok},
		{"a bad literal", tokIssuer, signJSON(stdHeader, claimsWith(`"x":tru`)), invalid},
		{"a bad number", tokIssuer, signJSON(stdHeader, claimsWith(`"x":1.`)), invalid},
		{"a bad escape", tokIssuer, signJSON(stdHeader, claimsWith(`"x":"\x"`)), invalid},
		{"a short \\u escape", tokIssuer, signJSON(stdHeader, claimsWith(`"x":"\u12"`)), invalid},
		{"too long", tokIssuer, signJSON(stdHeader, claimsWith(`"pad":"`+strings.Repeat("x", 4096)+`"`)), tooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := testVerifier(tc.issuer, tokNow).user(tc.raw)
			switch {
			case tc.want == ok && (err != nil || !ValidUser(got)):
				t.Fatalf("user(%q) = %q, %v; want a user", tc.raw, got, err)
			case tc.want != ok && (err == nil || events.ErrorMessage(err) != tc.want || events.ErrorCode(err) != events.Unauthorized):
				t.Fatalf("user(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
			}
			checkToken(t, tc.issuer, tokNow, tc.raw)
		})
	}
}

// TestVerifierHeaders: a header segment is remembered only once its token verified, and a
// remembered one still needs a good signature.
func TestVerifierHeaders(t *testing.T) {
	v := testVerifier(tokIssuer, tokNow)
	good := signJSON(`{"alg":"HS256","kid":"1"}`, claimsWith(""))
	hdr, _, _ := strings.Cut(good, ".")
	forged := good[:len(good)-3] + "AAA"
	if _, err := v.user(forged); err == nil || v.tokens.knownHeader(hdr) {
		t.Fatalf("a forged token passed (%v) or left its header behind", err)
	}
	if u, err := v.user(good); err != nil || u != "alice" || !v.tokens.knownHeader(hdr) {
		t.Fatalf("user = %q, %v; header remembered %v", u, err, v.tokens.knownHeader(hdr))
	}
	if _, err := v.user(forged); err == nil {
		t.Fatal("a forged token with a remembered header passed")
	}
	for i := range 2 * headerSlots { // more headers than slots: the oldest make room
		tok := signJSON(fmt.Sprintf(`{"alg":"HS256","kid":"%d"}`, i), claimsWith(""))
		if u, err := v.user(tok); err != nil || u != "alice" {
			t.Fatalf("user = %q, %v", u, err)
		}
	}
	if v.tokens.knownHeader(hdr) {
		t.Error("more headers than slots, and the first is still there")
	}
}

// TestVerifierConcurrent: pooled scratch space is never shared by two verifications.
func TestVerifierConcurrent(t *testing.T) {
	v := testVerifier(tokIssuer, tokNow)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			user := fmt.Sprintf("buyer-%d", i)
			tok, _ := MintToken(tokSecret, tokIssuer, user, time.Hour, tokNow)
			for range 2000 {
				if u, err := v.user(tok); u != user || err != nil {
					t.Errorf("user = %q, %v; want %q", u, err, user)
					return
				}
			}
		})
	}
	wg.Wait()
}

// fuzzSeeds are tokens and claims sets for the fuzz tests to start from.
func fuzzSeeds() (tokens []string, jsonPairs [][2]string) {
	minted, _ := MintToken(tokSecret, tokIssuer, "alice", time.Hour, tokNow)
	expired, _ := MintToken(tokSecret, tokIssuer, "bob", time.Second, tokNow.Add(-time.Minute))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": tokNow.Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	tokens = []string{minted, expired, none, minted + "=", minted[:len(minted)-1], "a.b.c", "..", "",
		strings.Replace(minted, ".", "=.", 1)}
	for _, p := range [][2]string{
		{stdHeader, claimsWith("")},
		{stdHeader, claimsWith(`"aud":["a","b"],"jti":"x","nbf":1799999999`)},
		{`{"alg":"HS256","typ":5}`, claimsWith("")},
		{`{"alg":"HS256","crit":["b64"]}`, claimsWith("")},
		{`{"alg":"none"}`, claimsWith("")},
		{`{"alg":"HS\u0032\u0035\u0036"}`, `{"ſub":"a","exp":"1800003600"}`},
		{stdHeader, `{"SUB":"\ud83d\ude00","Exp":1.8e9,"nbf":null,"aud":null}`},
		{stdHeader, `{"sub":"alice","exp":1799999995}`},
		{stdHeader, `{"sub":"alice","exp":1799999994.999}`},
		{stdHeader, `{"sub":"alice","exp":1800000000,"nbf":1800000005.5}`},
		{stdHeader, `{"sub":"a","exp":1e300,"iss":"x"}`},
		{stdHeader, `{"sub":"a","exp":-1e300}`},
		{stdHeader, `{"sub":"a","exp":1e400}`},
		{stdHeader, `{"sub":"a","sub":"b","exp":1800003600}`},
		{stdHeader, `null`},
		// Found by the fuzzers.
		{`{"alg":"HS256","crit":[]}`, claimsWith("")},
		{"{\"alg\":\"HS256\",\"\x8c\":\"\"}", "{\"suB\":\"\xff\",\"eXp\":1800000000}"},
		{`{"alg":"HS256"}`, `{"ſUb":"a","eXp":"1800000000"}`},
		{`{"alg":"HS256"}`, `{"sub":"a","eXp":0.0000000}`},
		{`{"alg":"HS256"}`, `{"":[{"":{}}],"0":"","exp":""}`},
		{`{"alg":"HS256"}`, `{"eXp":"0e\"\"\u0080"}`},
		{stdHeader, `{"x":[{"y":{}}],"sub":"a\u0000","exp":"-0.0e+1"}`},
	} {
		jsonPairs = append(jsonPairs, p)
		tokens = append(tokens, signJSON(p[0], p[1]))
	}
	return tokens, jsonPairs
}

// FuzzVerifier holds the verifier to golang-jwt on any token: with resign, the fuzzer's header
// and payload segments, whatever their spelling, get a good signature.
func FuzzVerifier(f *testing.F) {
	tokens, _ := fuzzSeeds()
	for _, tok := range tokens {
		f.Add(tok, false, true, int64(0))
		f.Add(tok, true, false, int64(3600))
	}
	f.Fuzz(func(t *testing.T, raw string, resign, issuer bool, skew int64) {
		if resign {
			if i := strings.LastIndexByte(raw, '.'); i >= 0 {
				raw = signSegments(raw[:i])
			}
		}
		iss := ""
		if issuer {
			iss = tokIssuer
		}
		checkToken(t, iss, tokNow.Add(time.Duration(skew)*time.Second), raw)
	})
}

// FuzzVerifierJSON holds the verifier to golang-jwt on signed tokens of any header and claims.
func FuzzVerifierJSON(f *testing.F) {
	_, pairs := fuzzSeeds()
	for _, p := range pairs {
		f.Add([]byte(p[0]), []byte(p[1]), true, int64(0))
		f.Add([]byte(p[0]), []byte(p[1]), false, int64(-7))
	}
	f.Fuzz(func(t *testing.T, header, claims []byte, issuer bool, skew int64) {
		iss := ""
		if issuer {
			iss = tokIssuer
		}
		checkToken(t, iss, tokNow.Add(time.Duration(skew)*time.Second), signJSON(string(header), string(claims)))
	})
}

// FuzzTokenClaims: parseClaims reads what encoding/json reads into jwt.RegisteredClaims, or
// refuses a claim named twice.
func FuzzTokenClaims(f *testing.F) {
	_, pairs := fuzzSeeds()
	for _, p := range pairs {
		f.Add([]byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseClaims(b)
		var want jwt.RegisteredClaims
		err := json.Unmarshal(b, &want)
		dup := false
		counts := map[string]int{}
		members(b, func(k string, _ json.RawMessage) {
			for _, name := range claimNames {
				if strings.EqualFold(k, name) {
					counts[name]++
					dup = dup || counts[name] > 1
				}
			}
		})
		// null decodes to no claims at all; parseClaims refuses it, as the verifier would for
		// want of exp anyway.
		if dup || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			if ok {
				t.Fatalf("%q: parsed; want refused", b)
			}
			return
		}
		if ok != (err == nil) {
			t.Fatalf("%q: parsed %v; encoding/json: %v", b, ok, err)
		}
		if !ok {
			return
		}
		if string(got.sub) != want.Subject || string(got.iss) != want.Issuer ||
			got.hasExp != (want.ExpiresAt != nil) || got.hasExp && !got.exp.Equal(want.ExpiresAt.Time) ||
			got.hasNbf != (want.NotBefore != nil) || got.hasNbf && !got.nbf.Equal(want.NotBefore.Time) {
			t.Fatalf("%q: parsed %+v; encoding/json %+v", b, got, want)
		}
	})
}

// BenchmarkVerify: one buyer's token checked by golang-jwt with the api's former options and
// by the verifier, which has seen its header before, as it has in production; and a hit in the
// verified-token cache the api had.
func BenchmarkVerify(b *testing.B) {
	raw, _ := MintToken(tokSecret, tokIssuer, "buyer-12345", time.Hour, time.Now())
	b.Run("old", func(b *testing.B) {
		parser := oracleParser(tokIssuer, time.Now())
		b.ReportAllocs()
		for b.Loop() {
			var claims jwt.RegisteredClaims
			if _, err := parser.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return tokSecret, nil }); err != nil || !ValidUser(claims.Subject) {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		v := newVerifier(tokSecret, tokIssuer)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.user(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-header-unseen", func(b *testing.B) {
		// What remembering header segments saves: here every token's header is decoded.
		v := newVerifier(tokSecret, tokIssuer)
		b.ReportAllocs()
		for b.Loop() {
			for i := range v.tokens.headers {
				v.tokens.headers[i].Store(nil)
			}
			if _, err := v.user(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-parallel", func(b *testing.B) {
		v := newVerifier(tokSecret, tokIssuer)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := v.user(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("old-cache-hit", func(b *testing.B) {
		// The former cache: a sync.Map of 100,000 tokens, looked up with the time.
		var cache sync.Map
		for i := range 100_000 {
			tok, _ := MintToken(tokSecret, tokIssuer, fmt.Sprint("buyer-", i), time.Hour, time.Now())
			cache.Store(tok, struct {
				user    string
				expires time.Time
			}{fmt.Sprint("buyer-", i), time.Now().Add(time.Hour)})
		}
		cache.Store(raw, struct {
			user    string
			expires time.Time
		}{"buyer-12345", time.Now().Add(time.Hour)})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, ok := cache.Load(raw); !ok || time.Now().IsZero() {
				b.Fatal("miss")
			}
		}
	})
}

package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/events"
)

var (
	tokSecret = []byte("token-test-secret-of-32-bytes-or-more")
	tokNow    = time.Unix(1_800_000_000, 0)
)

const tokIssuer = "shop"

func testVerifier(issuer string, now time.Time) *verifier {
	v := newVerifier(tokSecret, issuer, "")
	v.now = func() time.Time { return now }
	return v
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
	minted, err := MintToken(tokSecret, tokIssuer, "", "alice", time.Hour, tokNow)
	if err != nil {
		t.Fatal(err)
	}
	otherSecret, _ := MintToken([]byte("another-secret-of-at-least-32-bytes"), tokIssuer, "", "alice", time.Hour, tokNow)
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
		{"alg twice", tokIssuer, signJSON(`{"alg":"HS256","alg":"HS256"}`, claimsWith("")), ok},
		{"header members of every kind", tokIssuer, signJSON(` {"alg":"HS256","kid":"k1","jwk":{"k":[1,2.5e3,true,false,null,{}]},"x":[]} `, claimsWith("")), ok},
		{"typ a number", tokIssuer, signJSON(`{"alg":"HS256","typ":5}`, claimsWith("")), invalid},
		{"typ null", tokIssuer, signJSON(`{"alg":"HS256","typ":null}`, claimsWith("")), invalid},
		{"crit", tokIssuer, signJSON(`{"alg":"HS256","crit":["exp"]}`, claimsWith("")), invalid},
		{"typ JWT", tokIssuer, signJSON(`{"alg":"HS256","typ":"JWT"}`, claimsWith("")), ok},
		{"no typ", tokIssuer, signJSON(`{"alg":"HS256"}`, claimsWith("")), ok},
		{"typ at+jwt (RFC 8725 §3.11)", tokIssuer, signJSON(`{"alg":"HS256","typ":"at+jwt"}`, claimsWith("")), invalid},
		// typ is a media type, compared without case, "application/" implied (RFC 7515 §4.1.9;
		// RFC 7519 §5.1 recommends "JWT" only for legacy readers).
		{"typ jwt", tokIssuer, signJSON(`{"alg":"HS256","typ":"jwt"}`, claimsWith("")), ok},
		{"typ application/jwt", tokIssuer, signJSON(`{"alg":"HS256","typ":"application/jwt"}`, claimsWith("")), ok},
		{"typ Application/JWT", tokIssuer, signJSON(`{"alg":"HS256","typ":"Application/JWT"}`, claimsWith("")), ok},
		{"typ application/at+jwt", tokIssuer, signJSON(`{"alg":"HS256","typ":"application/at+jwt"}`, claimsWith("")), invalid},
		{"typ text/jwt", tokIssuer, signJSON(`{"alg":"HS256","typ":"text/jwt"}`, claimsWith("")), invalid},
		{"typ JWT with a space", tokIssuer, signJSON(`{"alg":"HS256","typ":"JWT "}`, claimsWith("")), invalid},
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
		{"exp a string", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":"`+exp(time.Hour)+`"}`), invalid},
		{"exp a string of no number", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":"soon"}`), invalid},
		{"exp a string with space", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":" `+exp(time.Hour)+`"}`), invalid},
		{"exp true", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":true}`), invalid},
		{"exp an object", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":{}}`), invalid},
		{"exp out of range", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":1e400}`), invalid},
		{"exp huge", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":1e300}`), expired},
		{"exp with a fraction and exponent", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":18000036.005e2}`), ok},
		{"exp negative", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":-1.5}`), expired},
		{"exp 01", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":01}`), invalid},
		{"EXP is not exp", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","EXP":`+exp(time.Hour)+`}`), invalid},
		{"Exp beside exp", tokIssuer, signJSON(stdHeader, claimsWith(`"Exp":`+exp(-time.Hour))), ok},
		{"nbf ahead", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(time.Minute))), invalid},
		{"nbf within the leeway", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(5*time.Second))), ok},
		{"nbf just beyond the leeway", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(6*time.Second))), invalid},
		{"nbf past", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":`+exp(-time.Hour))), ok},
		{"nbf null", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":null`)), invalid},
		{"nbf a string", tokIssuer, signJSON(stdHeader, claimsWith(`"nbf":"x"`)), invalid},
		{"iat a string (iat is not used)", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(time.Hour)+`,"iat":"x"}`), ok},
		{"iat ahead", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(time.Hour)+`,"iat":`+exp(time.Minute)+`}`), ok},
		{"no iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","exp":`+exp(time.Hour)+`}`), invalid},
		{"no iss, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","exp":`+exp(time.Hour)+`}`), ok},
		{"another iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(time.Hour)+`}`), invalid},
		{"another iss, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(time.Hour)+`}`), ok},
		{"iss a number, none configured", anyIssuer, signJSON(stdHeader, `{"sub":"alice","iss":5,"exp":`+exp(time.Hour)+`}`), ok},
		{"iss null", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":null,"exp":`+exp(time.Hour)+`}`), invalid},
		{"iss escaped", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"sh\u006fp","exp":`+exp(time.Hour)+`}`), ok},
		{"expired and another iss", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"evil","exp":`+exp(-time.Hour)+`}`), expired},
		{"expired and not yet valid", tokIssuer, signJSON(stdHeader, `{"sub":"alice","iss":"shop","exp":`+exp(-time.Hour)+`,"nbf":`+exp(time.Hour)+`}`), expired},
		{"expired and no sub", tokIssuer, signJSON(stdHeader, `{"iss":"shop","exp":`+exp(-time.Hour)+`}`), expired},
		{"no sub", tokIssuer, signJSON(stdHeader, `{"iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub null", tokIssuer, signJSON(stdHeader, `{"sub":null,"iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub a number", tokIssuer, signJSON(stdHeader, `{"sub":42,"iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with a newline", tokIssuer, signJSON(stdHeader, `{"sub":"ali\nce","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub too long", tokIssuer, signJSON(stdHeader, `{"sub":"`+strings.Repeat("a", 129)+`","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub escaped", tokIssuer, signJSON(stdHeader, `{"sub":"\u0061lice \ud83d\ude00 \"q\"","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub with a lone surrogate", tokIssuer, signJSON(stdHeader, `{"sub":"a\ud83d","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with invalid UTF-8", tokIssuer, signJSON(stdHeader, "{\"sub\":\"a\xff\xe2\x82\",\"iss\":\"shop\",\"exp\":"+exp(time.Hour)+"}"), badSub},
		{"sub with the replacement character", tokIssuer, signJSON(stdHeader, `{"sub":"a\ufffdb","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with a bidi override", tokIssuer, signJSON(stdHeader, `{"sub":"a\u202eb","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with a zero-width space", tokIssuer, signJSON(stdHeader, `{"sub":"a\u200bb","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with a private-use character", tokIssuer, signJSON(stdHeader, `{"sub":"a\ue000b","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub with a raw control character", tokIssuer, signJSON(stdHeader, "{\"sub\":\"a\x01\",\"iss\":\"shop\",\"exp\":"+exp(time.Hour)+"}"), invalid},
		{"SUB is not sub", tokIssuer, signJSON(stdHeader, `{"SUB":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"ſub is not sub", tokIssuer, signJSON(stdHeader, `{"ſub":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), badSub},
		{"sub escaped in its name", tokIssuer, signJSON(stdHeader, `{"\u0073ub":"alice","iss":"shop","exp":`+exp(time.Hour)+`}`), ok},
		{"sub twice: the last one (RFC 7519 §4)", tokIssuer, signJSON(stdHeader, claimsWith(`"sub":"bob"`)), ok},
		{"jti", tokIssuer, signJSON(stdHeader, claimsWith(`"jti":"j1"`)), ok},
		{"jti a number (jti is not used)", tokIssuer, signJSON(stdHeader, claimsWith(`"jti":1`)), ok},
		{"aud a string", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":"a"`)), ok},
		{"aud strings", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":["a", "b"]`)), ok},
		{"aud empty", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":[]`)), ok},
		{"aud null", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":null`)), ok},
		{"aud with null, none configured", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":["a",null]`)), ok},
		{"aud a number, none configured", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":1`)), ok},
		{"aud nested, none configured", tokIssuer, signJSON(stdHeader, claimsWith(`"aud":[["a"]]`)), ok},
		{"other claims of every kind", tokIssuer, signJSON(stdHeader, claimsWith(`"x":{"y":[1,-0.5E-3,"s\/",true,false,null]},"":0,"subject":1`)), ok},
		{"a bad literal", tokIssuer, signJSON(stdHeader, claimsWith(`"x":tru`)), invalid},
		{"a bad number", tokIssuer, signJSON(stdHeader, claimsWith(`"x":1.`)), invalid},
		{"a bad escape", tokIssuer, signJSON(stdHeader, claimsWith(`"x":"\x"`)), invalid},
		{"a short \\u escape", tokIssuer, signJSON(stdHeader, claimsWith(`"x":"\u12"`)), invalid},
		{"too long", tokIssuer, signJSON(stdHeader, claimsWith(`"pad":"`+strings.Repeat("x", 4096)+`"`)), tooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := testVerifier(tc.issuer, tokNow).user(tc.raw)
			switch {
			case tc.want == ok && (err != nil || !events.ValidUser(got)):
				t.Fatalf("user(%q) = %q, %v; want a user", tc.raw, got, err)
			case tc.want != ok && (err == nil || events.ErrorMessage(err) != tc.want || events.ErrorCode(err) != events.Unauthorized):
				t.Fatalf("user(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
			}
		})
	}
}

// TestVerifierAudience: with an audience configured, aud is required and must name it.
func TestVerifierAudience(t *testing.T) {
	v := newVerifier(tokSecret, tokIssuer, "seckill")
	v.now = func() time.Time { return tokNow }
	for _, tc := range []struct {
		name, aud string
		ok        bool
	}{
		{"no aud", "", false},
		{"ours", `"aud":"seckill"`, true},
		{"ours among others", `"aud":["billing","seckill"]`, true},
		{"another", `"aud":"billing"`, false},
		{"ours in another case", `"aud":"SECKILL"`, false},
		{"empty list", `"aud":[]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := v.user(signJSON(stdHeader, claimsWith(tc.aud)))
			if (err == nil) != tc.ok {
				t.Errorf("aud %s: %v, want ok %v", tc.aud, err, tc.ok)
			}
		})
	}
	minted, _ := MintToken(tokSecret, tokIssuer, "seckill", "alice", time.Hour, tokNow)
	// Accepted until its exp and the leeway: what an event stream it opens lives to.
	if u, until, err := v.user(minted); u != "alice" || err != nil || !until.Equal(tokNow.Add(time.Hour+tokenLeeway)) {
		t.Errorf("a token minted for the audience: %q until %v, %v; want alice until %v", u, until, err, tokNow.Add(time.Hour+tokenLeeway))
	}
}

// TestVerifierConcurrent: verifications share nothing that one could change under another.
func TestVerifierConcurrent(t *testing.T) {
	v := testVerifier(tokIssuer, tokNow)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			user := fmt.Sprintf("buyer-%d", i)
			tok, _ := MintToken(tokSecret, tokIssuer, "", user, time.Hour, tokNow)
			for range 500 {
				if u, _, err := v.user(tok); u != user || err != nil {
					t.Errorf("user = %q, %v; want %q", u, err, user)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSameSecret: the admin token is compared whole, whatever the lengths.
func TestSameSecret(t *testing.T) {
	const want = "admin-token-of-at-least-32-bytes!!"
	for got, ok := range map[string]bool{want: true, want[:31]: false, want + "x": false, "": false, strings.ToUpper(want): false} {
		if sameSecret(got, want) != ok {
			t.Errorf("sameSecret(%q) = %v", got, !ok)
		}
	}
}

// BenchmarkVerify: one buyer's token checked by the verifier (golang-jwt, map claims), and by
// golang-jwt into RegisteredClaims, side by side.
func BenchmarkVerify(b *testing.B) {
	raw, _ := MintToken(tokSecret, tokIssuer, "", "buyer-12345", time.Hour, time.Now())
	b.Run("verifier", func(b *testing.B) {
		v := newVerifier(tokSecret, tokIssuer, "")
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := v.user(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("registered-claims", func(b *testing.B) {
		parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer(tokIssuer))
		b.ReportAllocs()
		for b.Loop() {
			var claims jwt.RegisteredClaims
			if _, err := parser.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return tokSecret, nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

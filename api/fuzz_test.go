package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
)

// FuzzDecodePurchase: any body either decodes to a quantity the reserve script can take, or is
// refused as invalid_request; nothing panics.
func FuzzDecodePurchase(f *testing.F) {
	for _, s := range []string{`{"quantity": 1}`, `{"quantity": 1.0}`, `{"quantity": -1}`, `{"quantity": 9223372036854775808}`,
		`{"quantity": "1"}`, `{}`, `null`, `[]`, `{"quantity": 1, "user_id": "x"}`, `{"quantity": 1}{}`, `{"quantity": 1e3}`,
		`{"quantity": 1099511627776}`, `{"QUANTITY": 2}`, `{"quantity": 0x10}`, "{\"quantity\": 1}\x00", `{"quantity": [[[[1]]]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req purchaseRequest
		err := decodeJSON(body, &req)
		if err == nil {
			var qty int
			qty, err = req.quantity()
			if err == nil {
				if qty < 1 || qty > events.MaxUnits {
					t.Fatalf("%q decoded to quantity %d", body, qty)
				}
				return
			}
		}
		if events.ErrorCode(err) != events.Invalid {
			t.Fatalf("%q: error %v, want invalid_request", body, err)
		}
	})
}

// FuzzDecodeCampaign: a campaign body decodes or is invalid_request; nothing panics, and a
// decoded one re-encodes to JSON that decodes the same.
func FuzzDecodeCampaign(f *testing.F) {
	for _, s := range []string{`{"id": "c", "name": "n", "stock": 1, "per_user_limit": 1}`, `{"stock": 1.5}`,
		`{"starts_at": "2030-01-01T00:00:00Z", "ends_at": null}`, `{"starts_at": "soon"}`, `{"name": "\ud800"}`, `{"id": 5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req campaignRequest
		if err := decodeJSON(body, &req); err != nil {
			if events.ErrorCode(err) != events.Invalid {
				t.Fatalf("%q: error %v, want invalid_request", body, err)
			}
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", req, err)
		}
		var again campaignRequest
		if err := decodeJSON(b, &again); err != nil {
			t.Fatalf("%s does not decode again: %v", b, err)
		}
	})
}

// FuzzKeyedOrderID: every valid key of every valid buyer names an order id of its campaign that
// events accepts, and IDTime refuses.
func FuzzKeyedOrderID(f *testing.F) {
	f.Add("c1", "alice", "k")
	f.Add("summer-sale_1", "ü\u00a0x", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	f.Fuzz(func(t *testing.T, campaign, buyer, key string) {
		if !events.ValidCampaignID(campaign) || !events.ValidUser(buyer) || !validKey(key) {
			return
		}
		id := keyedOrderID([]byte("order-id-secret-of-at-least-32-bytes"), campaign, buyer, key)
		if c, ok := events.CampaignOf(id); !ok || c != campaign {
			t.Fatalf("%q: not an order id of %q", id, campaign)
		}
		if _, ok := events.IDTime(id); ok {
			t.Fatalf("IDTime accepts %q", id)
		}
	})
}

// FuzzBuyerToken: no bearer token but a signed, unexpired HS256 one with a valid sub names a
// buyer; nothing panics.
func FuzzBuyerToken(f *testing.F) {
	secret := []byte("fuzz-secret-of-at-least-32-bytes!!")
	v := newVerifier(secret, "iss", "")
	good, _ := MintToken(secret, "iss", "", "alice", time.Hour, time.Now())
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6NDEwMjQ0NDgwMH0.")
	f.Add(strings.Repeat("a.", 3000))
	f.Fuzz(func(t *testing.T, raw string) {
		u, _, err := v.user(raw)
		if err != nil {
			if events.ErrorCode(err) != events.Unauthorized {
				t.Fatalf("%q: error %v, want unauthorized", raw, err)
			}
			return
		}
		if !events.ValidUser(u) || raw != good {
			t.Fatalf("%q authenticates %q", raw, u)
		}
	})
}

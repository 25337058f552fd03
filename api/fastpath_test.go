package api

import (
	"encoding/json"
	"testing"

	"github.com/seckill/seckill/events"
)

// FuzzQuickQuantity: whenever the fast path reads a body, the strict decoder reads the same
// quantity from it without complaint.
func FuzzQuickQuantity(f *testing.F) {
	for _, s := range []string{`{"quantity":1}`, ` { "quantity" : 42 } `, "{\"quantity\":\t7}\n", `{"quantity":0}`,
		`{"quantity":01}`, `{"quantity":1.5}`, `{"quantity":1,"x":2}`, `{"Quantity":3}`, `{"quantity":999999999}`,
		`{"quantity":1000000000}`, `{"quantity":-1}`, `{"quantity":"1"}`, `{"quantity":1}{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		q, ok := quickQuantity(body)
		if !ok {
			return
		}
		var req purchaseRequest
		if err := decodeJSON(body, &req); err != nil {
			t.Fatalf("fast path read %d from %q, the strict decoder refuses it: %v", q, body, err)
		}
		strict, err := req.quantity()
		if err != nil || strict != q {
			t.Fatalf("fast path read %d from %q, the strict decoder %d (%v)", q, body, strict, err)
		}
	})
}

func TestQuickQuantity(t *testing.T) {
	for body, want := range map[string]int{`{"quantity":1}`: 1, ` { "quantity" : 42 } `: 42, `{"quantity":999999999}`: 999999999} {
		if q, ok := quickQuantity([]byte(body)); !ok || q != want {
			t.Errorf("quickQuantity(%q) = %d, %v; want %d", body, q, ok, want)
		}
	}
	for _, body := range []string{`{"quantity":0}`, `{"quantity":01}`, `{"quantity":1.5}`, `{"quantity":1,"x":2}`,
		`{"Quantity":3}`, `{"quantity":1000000000}`, `{"quantity":-1}`, `{"quantity":1}{}`, ``} {
		if q, ok := quickQuantity([]byte(body)); ok {
			t.Errorf("quickQuantity(%q) = %d: should be left to the strict decoder", body, q)
		}
	}
}

func TestPurchaseResponseJSON(t *testing.T) {
	for _, p := range []purchaseResponse{
		{OrderID: events.NewOrderID("camp_1-x"), Status: events.Pending},
		{OrderID: KeyedOrderID("c", "alice", "key-1"), Status: events.Pending},
	} {
		want, _ := json.Marshal(p)
		if got := p.appendJSON(nil); string(got) != string(want) {
			t.Errorf("appendJSON = %s, json.Marshal = %s", got, want)
		}
	}
}

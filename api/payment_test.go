package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store"
)

// TestPaymentContract walks every answer of POST /v1/admin/orders/{id}/payment, each checked
// against the spec: an order is paid once, by one payment, inside its window only.
func TestPaymentContract(t *testing.T) {
	const paymentToken = "payment-service-token-0123456789abcdef"
	h := newHarness(t, func(c *api.Config) { c.PaymentToken = paymentToken })
	camp := h.createCampaign(t, `{"id": "paywin", "name": "Pay", "stock": 10, "per_user_limit": 5, "payment_window_seconds": 60}`)
	wantField(t, camp, "payment_window_seconds", float64(60))
	wantField(t, camp, "paid", float64(0))
	plain := h.createCampaign(t, `{"id": "nopay", "name": "No payment step", "stock": 10, "per_user_limit": 5}`)
	wantField(t, plain, "payment_window_seconds", float64(0))

	payer := []string{"Authorization", "Bearer " + paymentToken}
	pay := func(id, paymentID string, headers ...string) *http.Request {
		return request("POST", "/v1/admin/orders/"+id+"/payment", `{"payment_id": "`+paymentID+`"}`, headers...)
	}

	pending := h.buy(t, "paywin", "ann", 1)
	h.fail(t, pay(pending, "p-1", payer...), http.StatusConflict, events.OrderNotConfirmed)
	h.confirm(t, pending)
	order := h.do(t, request("GET", "/v1/orders/"+pending, "", user("ann")...), http.StatusOK)
	wantField(t, order, "status", "confirmed")
	if payBy, _ := order["pay_by"].(string); payBy == "" {
		t.Errorf("a confirmed order of a campaign with a window has no pay_by: %v", order)
	}

	// Who may pay, and what a payment id may be.
	h.fail(t, pay(pending, "p-1"), http.StatusUnauthorized, events.Unauthorized)
	h.fail(t, pay(pending, "p-1", "Authorization", "Bearer wrong-token-wrong-token-wrong-token"), http.StatusUnauthorized, events.Unauthorized)
	h.fail(t, pay(pending, "", payer...), http.StatusBadRequest, events.Invalid)
	h.fail(t, pay(pending, strings.Repeat("x", 256), payer...), http.StatusBadRequest, events.Invalid)
	h.fail(t, pay(pending, `tab\there`, payer...), http.StatusBadRequest, events.Invalid)
	// "p-1 " would be another payment than "p-1", though the same to anyone reading it.
	for _, spaced := range []string{"p-1 ", " p-1", "p 1", " "} {
		h.fail(t, pay(pending, spaced, payer...), http.StatusBadRequest, events.Invalid)
	}
	h.fail(t, pay("paywin.nosuchorder", "p-1", payer...), http.StatusNotFound, events.OrderNotFound)
	h.fail(t, pay("not-an-order-id", "p-1", payer...), http.StatusNotFound, events.OrderNotFound)
	// The payment token records payments and nothing else.
	h.fail(t, request("POST", "/v1/admin/orders/"+pending+"/compensate", "", payer...), http.StatusUnauthorized, events.Unauthorized)

	paid := h.do(t, pay(pending, "p-1", payer...), http.StatusOK)
	wantField(t, paid, "status", "paid")
	wantField(t, paid, "payment_id", "p-1")
	again := h.do(t, pay(pending, "p-1", h.bearer()...), http.StatusOK) // the admin token may pay too
	wantField(t, again, "status", "paid")
	h.fail(t, pay(pending, "p-2", payer...), http.StatusConflict, events.AlreadyPaid)
	// One payment pays one order: another buyer's order paid with it is refused, still to pay.
	other := h.buy(t, "paywin", "dee", 1)
	h.confirm(t, other)
	h.fail(t, pay(other, "p-1", payer...), http.StatusConflict, events.PaymentReused)
	unpaid := h.do(t, request("GET", "/v1/orders/"+other, "", user("dee")...), http.StatusOK)
	wantField(t, unpaid, "status", "confirmed")
	if _, ok := unpaid["payment_id"]; ok {
		t.Errorf("an order refused a payment of another order shows one: %v", unpaid)
	}
	h.do(t, request("POST", "/v1/admin/orders/"+other+"/compensate", "", h.bearer()...), http.StatusOK) // its unit back, for the counts below
	camp = h.do(t, request("GET", "/v1/campaigns/paywin", ""), http.StatusOK)
	wantField(t, camp, "paid", float64(1))
	wantField(t, camp, "sold", float64(1))

	// A refund of a paid order gives its units back; a payment replayed after it is refused.
	refunded := h.do(t, request("POST", "/v1/admin/orders/"+pending+"/compensate", "", h.bearer()...), http.StatusOK)
	wantField(t, refunded, "status", "refunded")
	h.fail(t, pay(pending, "p-1", payer...), http.StatusConflict, events.OrderNotPayable)

	// No payment step: nothing to pay.
	noStep := h.buy(t, "nopay", "bob", 1)
	h.confirm(t, noStep)
	h.fail(t, pay(noStep, "p-3", payer...), http.StatusConflict, events.OrderNotPayable)

	// Past the window: refused before the compensator expires it, and after.
	late := h.buy(t, "paywin", "cid", 2)
	h.confirm(t, late)
	if _, err := h.store.DB().Exec(`UPDATE orders SET pay_by_ms = ? WHERE order_id = ?`, time.Now().Add(-time.Second).UnixMilli(), late); err != nil {
		t.Fatal(err)
	}
	h.fail(t, pay(late, "p-4", payer...), http.StatusConflict, events.PaymentWindowClosed)
	r := &compensator.Resolver{Store: h.store, Redis: h.redis, Producer: kafkatest.Client(t, h.brokers), Results: h.topics.Results}
	o, err := r.Expire(context.Background(), late, time.Now())
	if err != nil || o.Status != events.Expired {
		t.Fatalf("expire: %+v %v", o, err)
	}
	h.fail(t, pay(late, "p-4", payer...), http.StatusConflict, events.PaymentWindowClosed)
	camp = h.campaignShows(t, "paywin", "sold", float64(0))
	wantField(t, camp, "remaining", float64(10)) // the refunded unit and the expired two are back
	expired := h.do(t, request("GET", "/v1/orders/"+late, "", user("cid")...), http.StatusOK)
	wantField(t, expired, "status", "expired")

	// A window out of bounds.
	for _, body := range []string{
		`{"name": "x", "stock": 1, "per_user_limit": 1, "payment_window_seconds": -1}`,
		`{"name": "x", "stock": 1, "per_user_limit": 1, "payment_window_seconds": 604801}`,
		`{"name": "x", "stock": 1, "per_user_limit": 1, "payment_window_seconds": 1.5}`,
	} {
		h.fail(t, request("POST", "/v1/campaigns", body, h.bearer()...), http.StatusBadRequest, events.Invalid)
	}
}

// hangUpAfterPay is the store of a payment whose caller hangs up once the store has paid the
// order: its timeout ran out, or it was restarted.
type hangUpAfterPay struct {
	*store.Store
	hangUp context.CancelFunc
}

func (s hangUpAfterPay) PayOrder(ctx context.Context, orderID, paymentID string, now time.Time) (store.Order, bool, error) {
	o, changed, err := s.Store.PayOrder(ctx, orderID, paymentID, now)
	s.hangUp()
	return o, changed, err
}

// ackedProducer keeps the records Kafka acknowledged.
type ackedProducer struct {
	api.Producer
	mu    sync.Mutex
	acked []*kgo.Record
}

func (p *ackedProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.Producer.TryProduce(ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			p.mu.Lock()
			p.acked = append(p.acked, r)
			p.mu.Unlock()
		}
		promise(r, err)
	})
}

// TestPaymentAnnouncedWhenThePayerHangsUp: the store paid the order, then the payment service
// hung up. The announcement ran on the request's context and was cut short with it: the order
// stayed paid in the store and OrderPaid never reached Kafka, so the buyer's stream never heard
// of it and a store restored from a backup had nothing to record the payment again from.
func TestPaymentAnnouncedWhenThePayerHangsUp(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "hang", "name": "Hang-up", "stock": 10, "per_user_limit": 5, "payment_window_seconds": 60}`)
	id := h.buy(t, "hang", "ann", 1)
	h.confirm(t, id)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &ackedProducer{Producer: kafkatest.Client(t, h.brokers)}
	srv := h.replica(t, hangUpAfterPay{Store: h.store, hangUp: cancel}, h.redis, p)
	req := request("POST", "/v1/admin/orders/"+id+"/payment", `{"payment_id": "p-1"}`, h.bearer()...)
	srv.Handler().ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))

	if o, err := h.store.Order(context.Background(), id); err != nil || o.Status != events.Paid {
		t.Fatalf("the store has %+v, %v; want it paid", o, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.acked {
		if e, err := events.Decode(r.Value); err == nil && e.Type == events.OrderPaid && e.OrderID == id {
			return
		}
	}
	t.Errorf("order %s is paid in the store, but Kafka took no OrderPaid of it (%d records acknowledged)", id, len(p.acked))
}

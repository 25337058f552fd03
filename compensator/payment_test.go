package compensator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// recordingProducer is Kafka taking every record, or refusing each with refuse when it is set;
// it keeps the events it was handed.
type recordingProducer struct {
	refuse error
	mu     sync.Mutex
	evs    []events.Event
}

func (p *recordingProducer) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if e, err := events.Decode(r.Value); err == nil {
		p.mu.Lock()
		p.evs = append(p.evs, e)
		p.mu.Unlock()
	}
	promise(r, p.refuse)
}

// announced returns how many events of type t name orderID.
func (p *recordingProducer) announced(t events.Type, orderID string) int {
	return len(p.announcements(t, orderID))
}

// announcements returns the events of type t that name orderID.
func (p *recordingProducer) announcements(t events.Type, orderID string) []events.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var evs []events.Event
	for _, e := range p.evs {
		if e.Type == t && e.OrderID == orderID {
			evs = append(evs, e)
		}
	}
	return evs
}

// TestPaymentRetryAnnouncesAgain: a payment stored while Kafka refused its OrderPaid is answered
// unavailable, and (like one whose api died between the store and the produce) retried by the
// payment service with the same payment id; the retry must announce it, or the results topic
// never says the order was paid, a replay after a store restore cannot record it, and its
// buyer's event stream waits at confirmed.
func TestPaymentRetryAnnouncesAgain(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	ev := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ev})
	r := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: refusingProducer{}, Results: e.topics.Results}
	// Paid in the store, not announced: the payment service must hear to retry.
	o, err := r.Pay(e.ctx, ev.OrderID, "pay-1")
	if events.ErrorCode(err) != events.Unavailable || o.Status != events.Paid {
		t.Fatalf("pay while Kafka refuses the announcement: %+v %v; want the order paid and unavailable", o, err)
	}
	// Until Kafka has the payment the store alone holds it, and a store restored from a backup
	// meanwhile loses it: the payment service must hold on to it, not leave it to the sweeper.
	if msg := events.ErrorMessage(err); !strings.Contains(msg, "until it answers 200") || strings.Contains(msg, "sweeper") {
		t.Errorf("the answer %q does not tell the payment service to pay again until it answers 200", msg)
	}
	kafka := &recordingProducer{}
	r.Producer = kafka
	if o, err := r.Pay(e.ctx, ev.OrderID, "pay-1"); err != nil || o.Status != events.Paid {
		t.Fatalf("pay again with the same payment id: %+v %v", o, err)
	}
	if n := kafka.announced(events.OrderPaid, ev.OrderID); n != 1 {
		t.Errorf("the retried payment announced OrderPaid %d times, want 1", n)
	}
	// A refused payment announces nothing.
	if _, err := r.Pay(e.ctx, ev.OrderID, "pay-2"); events.ErrorCode(err) != events.AlreadyPaid {
		t.Fatalf("pay with another payment id: %v, want already_paid", err)
	}
	if n := kafka.announced(events.OrderPaid, ev.OrderID); n != 1 {
		t.Errorf("after a refused payment OrderPaid was announced %d times, want still 1", n)
	}
}

// TestRefundNamesThePayment: the OrderRefunded of a paid order carries its payment id, so that
// a payment service reading the results topic knows which payment to give back; that of an
// order refunded before it was paid carries none.
func TestRefundNamesThePayment(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	paid, unpaid := evs[0].OrderID, evs[1].OrderID
	kafka := &recordingProducer{}
	r := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	if o, err := r.Pay(e.ctx, paid, "pay-1"); err != nil || o.Status != events.Paid {
		t.Fatalf("pay: %+v %v", o, err)
	}
	for id, want := range map[string]string{paid: "pay-1", unpaid: ""} {
		if o, err := r.Compensate(e.ctx, id); err != nil || o.Status != events.Refunded {
			t.Fatalf("refund %s: %+v %v", id, o, err)
		}
		refunds := kafka.announcements(events.OrderRefunded, id)
		if len(refunds) != 1 {
			t.Fatalf("refund of %s announced %d times, want once", id, len(refunds))
		}
		if refunds[0].PaymentID != want {
			t.Errorf("OrderRefunded of %s carries payment id %q, want %q", id, refunds[0].PaymentID, want)
		}
	}
}

// TestCompensateAFinishedRefund: an operator compensates a refunded paid order again. A refund
// the store records finished (MarkRefunded runs only once Kafka has its OrderRefunded) is
// answered as it is, announced no second time: the payment service gives the payment back on
// each OrderRefunded it reads, and an operator's repeated click must not ask it twice. One whose
// announcement Kafka refused is finished by the same command, and announced then.
func TestCompensateAFinishedRefund(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	finished, refused := evs[0].OrderID, evs[1].OrderID
	kafka := &recordingProducer{}
	r := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	for i, id := range []string{finished, refused} {
		if o, err := r.Pay(e.ctx, id, fmt.Sprintf("pay-%d", i)); err != nil || o.Status != events.Paid {
			t.Fatalf("pay %s: %+v %v", id, o, err)
		}
	}
	if o, err := r.Compensate(e.ctx, finished); err != nil || o.Status != events.Refunded {
		t.Fatalf("refund %s: %+v %v", finished, o, err)
	}
	kafka.refuse = errors.New("kafka refuses the record")
	if o, err := r.Compensate(e.ctx, refused); events.ErrorCode(err) != events.Unavailable || o.Status != events.Refunded {
		t.Fatalf("refund %s while Kafka refuses: %+v %v; want refunded, unavailable", refused, o, err)
	}
	kafka.refuse = nil
	for id, want := range map[string]int{finished: 1, refused: 2} {
		if o, err := r.Compensate(e.ctx, id); err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
			t.Fatalf("compensate %s again: %+v %v; want refunded, %s", id, o, err, events.ReasonOperator)
		}
		if n := kafka.announced(events.OrderRefunded, id); n != want {
			t.Errorf("OrderRefunded of %s announced %d times, want %d", id, n, want)
		}
	}
	e.wantConserved(t, map[string]int64{}, "paid")
}

// TestExpiryOfAnOrderEndedMeanwhile: the sweeper lists the orders past their pay_by, then
// expires them one by one; an order paid (the api's clock behind the sweeper's) or refunded in
// between is returned as it is by the store, and its expiry must stop there. Carried on into
// Redis, it would give back the units of an order the store holds paid (sold twice), or end a
// refunded one's reservation as expired.
func TestExpiryOfAnOrderEndedMeanwhile(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	kafka := &recordingProducer{}
	r := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	if _, err := r.Pay(e.ctx, evs[0].OrderID, "pay-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.RefundOrder(e.ctx, evs[1].OrderID); err != nil { // its redis step not run yet
		t.Fatal(err)
	}
	for i, want := range []events.Status{events.Paid, events.Refunded} {
		id := evs[i].OrderID
		if o, err := r.Expire(e.ctx, id, time.Now().Add(2*time.Hour)); err != nil || o.Status != want {
			t.Errorf("expire order %d: %+v %v, want it %s as it was", i, o, err, want)
		}
		if res, err := e.r.Reservation(e.ctx, id); err != nil || res.State != lua.StateConfirmed {
			t.Errorf("order %d's reservation after its expiry: %+v %v, want it confirmed still", i, res, err)
		}
		if n := kafka.announced(events.OrderExpired, id); n != 0 {
			t.Errorf("order %d announced expired %d times", i, n)
		}
	}
}

// TestPaymentOfACancelledCampaignsOrder: a cancel's run cut short right after its store step
// (its process killed, a dependency down: it answers 503, "run it again") has refunded the
// campaign's orders in the store, their units still held in Redis. A payment of one of them is
// refused as the campaign's cancel, and nothing changes: the order stays refunded, unpaid.
func TestPaymentOfACancelledCampaignsOrder(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	ev := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ev})
	if _, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error {
		c.CancelledAtMs = time.Now().UnixMilli() // as Cancel's store step, its run not going on
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	kafka := &recordingProducer{}
	r := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	o, err := r.Pay(e.ctx, ev.OrderID, "pay-1")
	if events.ErrorCode(err) != events.CampaignCancelled {
		t.Errorf("pay an order of a cancelled campaign: %+v %v; want campaign_cancelled", o, err)
	}
	if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Status != events.Refunded || o.PaymentID != "" {
		t.Errorf("the order after the refused payment: %+v %v; want it refunded, unpaid", o, err)
	}
	if n := kafka.announced(events.OrderPaid, ev.OrderID); n != 0 {
		t.Errorf("OrderPaid announced %d times for a refused payment", n)
	}
}

// TestCancelRacesPayments: payments arrive while a cancel runs. Each order ends refunded, its
// units back, counted by the cancel; a payment answered paid is named by its order's
// OrderRefunded, for the payment service to give it back; one refused took nothing, and was
// refused as the campaign's cancel.
func TestCancelRacesPayments(t *testing.T) {
	const n = 60
	e := newEnvPaying(t, 3*n, 3, time.Hour)
	evs := e.reserve(t, n, time.Hour)
	e.confirm(t, evs)
	kafka := &recordingProducer{}
	op := e.operator()
	op.Producer = kafka
	answers := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, ev := range evs {
		wg.Go(func() {
			<-start
			time.Sleep(time.Duration(i%20) * time.Millisecond)
			_, answers[i] = op.Pay(e.ctx, ev.OrderID, "pay-"+ev.OrderID)
		})
	}
	var tally compensator.Tally
	var cerr error
	wg.Go(func() {
		<-start
		_, tally, cerr = op.Cancel(e.ctx, e.campaign, nil)
	})
	close(start)
	wg.Wait()
	if cerr != nil {
		t.Fatalf("cancel: %v", cerr)
	}
	var paid, refused int
	for i, ev := range evs {
		o, err := e.st.Order(e.ctx, ev.OrderID)
		if err != nil || o.Status != events.Refunded {
			t.Errorf("order %d after the cancel: %+v %v; want refunded", i, o, err)
			continue
		}
		refunds := kafka.announcements(events.OrderRefunded, ev.OrderID)
		switch code := events.ErrorCode(answers[i]); {
		case answers[i] == nil:
			paid++
			if len(refunds) == 0 || refunds[len(refunds)-1].PaymentID != "pay-"+ev.OrderID || o.PaymentID != "pay-"+ev.OrderID {
				t.Errorf("order %d was answered paid; its row %+v, its refunds %+v: want them to name its payment", i, o, refunds)
			}
		case code == events.CampaignCancelled:
			refused++
			if o.PaymentID != "" || len(refunds) == 0 || refunds[len(refunds)-1].PaymentID != "" {
				t.Errorf("order %d's payment was refused (%v); its row %+v, its refunds %+v: want no payment on either", i, answers[i], o, refunds)
			}
		default:
			t.Errorf("payment %d: %v", i, answers[i])
		}
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d after the cancel, want the whole stock %d", left, e.stock)
	}
	if tally != (compensator.Tally{Refunded: n}) {
		t.Errorf("the cancel's tally: %+v; want all %d refunded", tally, n)
	}
	t.Logf("%d payments answered paid, %d refused; the cancel: %+v", paid, refused, tally)
}

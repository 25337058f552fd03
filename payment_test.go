package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/failpoint"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestPaymentWindowSale is a sale with a 6 s payment window on the real servers, the roles as
// processes: 300 buyers for a stock of 100; 60 % of the confirmed buyers pay at random moments
// (some twice with the same payment id, some at the window's edge), the others never do, and the
// compensator is killed with -9 in the middle of expiring them, again and again (8 times, then it
// runs clean: see setFailpointsFor). The units of the unpaid orders sell to a second wave, who
// pay. At the end every unit is paid for, each payment was answered paid or
// payment_window_closed and the order agrees, and the audit holds.
func TestPaymentWindowSale(t *testing.T) {
	buildEarly()
	t.Parallel()
	const stock, window = 100, 6 * time.Second
	c := newCluster(t, where{}, clusterOptions{})
	c.compensator.setFailpointsFor(failpoint.CompensatorMidExpiry+"=0.2", 8)
	if err := c.compensator.restart(t); err != nil {
		t.Fatal(err)
	}
	campaign := storetest.Name("paywin")
	body, _ := json.Marshal(map[string]any{"id": campaign, "name": "Payment window", "stock": stock, "per_user_limit": 1,
		"payment_window_seconds": int(window / time.Second)})
	if a := c.asAdmin(t, "POST", "/v1/campaigns", string(body)); a.status != http.StatusCreated {
		t.Fatalf("create campaign: %+v", a)
	}

	type payment struct {
		order, id string
		status    int
		code      string
		at        time.Duration // after the order's confirmation
	}
	var (
		mu       sync.Mutex
		payments []payment
	)
	// wave buys with buyers users at once and pays for share of the confirmed orders, at random
	// moments up to edge after each confirmation; it returns the orders answered 202.
	wave := func(prefix string, buyers int, share float64, edge time.Duration) []string {
		var accepted []string
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := c.buy(context.Background(), campaign, fmt.Sprintf("%s-%03d", prefix, i), 1, "")
				if a.status != http.StatusAccepted {
					if a.status != http.StatusConflict || a.code != "sold_out" {
						t.Errorf("purchase: %d %s %v", a.status, a.code, a.err)
					}
					return
				}
				mu.Lock()
				accepted = append(accepted, a.orderID)
				mu.Unlock()
				o := c.waitConfirmed(t, a.orderID)
				if rand.Float64() >= share {
					return // never pays
				}
				confirmedAt := time.UnixMilli(o.PayByMs).Add(-window)
				at := time.Duration(rand.Int64N(int64(edge)))
				time.Sleep(time.Until(confirmedAt.Add(at)))
				id := "pay-" + a.orderID
				times := 1 + rand.IntN(2) // some pay twice with the same payment id
				for range times {
					r := c.asAdmin(t, "POST", "/v1/admin/orders/"+a.orderID+"/payment", `{"payment_id": "`+id+`"}`)
					mu.Lock()
					payments = append(payments, payment{a.orderID, id, r.status, r.code, time.Since(confirmedAt)})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return accepted
	}
	first := wave("first", 300, 0.6, window+300*time.Millisecond)
	if len(first) != stock {
		t.Fatalf("the first wave was answered 202 %d times, want %d", len(first), stock)
	}
	// The unpaid orders expire by pay_by plus a sweep (later when the kills cut an expiry
	// short: the restarted compensator finishes it); their units sell again.
	eventually(t, 60*time.Second, "every unpaid order of the first wave expired, its units back", func() bool {
		orders, err := c.store.Orders(context.Background(), campaign)
		if err != nil {
			return false
		}
		for _, o := range orders {
			if o.Status == events.Confirmed || o.Status == events.Expired && o.Reason != events.ReasonUnpaid {
				return false
			}
		}
		return true
	})
	second := wave("second", 200, 1, time.Second)

	c.compensator.setFailpoints("")
	if err := c.compensator.restart(t); err != nil {
		t.Fatal(err)
	}
	c.settle(t, campaign, 30*time.Second)
	eventually(t, 30*time.Second, "every expired order's units are back", func() bool {
		todo, err := c.store.ExpiringOrders(context.Background(), time.Now(), store.ExpiryKey{}, 10)
		return err == nil && len(todo) == 0
	})
	f := c.checkFinal(t, campaign)
	audit := c.audit(t, campaign)

	camp, err := c.store.Campaign(context.Background(), campaign)
	if err != nil {
		t.Fatal(err)
	}
	paidUnits, err := c.store.PaidUnits(context.Background(), campaign)
	if err != nil {
		t.Fatal(err)
	}
	byStatus := map[events.Status]int{}
	for _, o := range f.orders {
		byStatus[o.Status]++
	}
	_, kills, _ := c.compensator.counts()
	var onTime, late, twice int
	answered := map[string][]payment{}
	for _, p := range payments {
		answered[p.order] = append(answered[p.order], p)
	}
	for order, ps := range answered {
		o := f.orders[order]
		for _, p := range ps {
			switch {
			case p.status == http.StatusOK && o.Status == events.Paid && o.PaymentID == p.id:
				onTime++
			case p.status == http.StatusConflict && p.code == "payment_window_closed" && o.Status == events.Expired:
				late++
			default:
				t.Errorf("payment of %s at %v answered %d %s, but the order ended %s", order, p.at.Round(time.Millisecond), p.status, p.code, o.Status)
			}
		}
		if len(ps) == 2 {
			twice++
			if ps[0].status != ps[1].status {
				t.Errorf("the same payment of %s answered %d, then %d", order, ps[0].status, ps[1].status)
			}
		}
	}
	t.Logf("first wave: %d orders; second wave: %d orders; %d payments (%d answered paid, %d payment_window_closed, %d orders paid twice with one id); compensator killed %d times mid-expiry",
		len(first), len(second), len(payments), onTime, late, twice, kills)
	t.Logf("orders by status: %v; sold %d, paid units %d, remaining %d", byStatus, camp.Sold, paidUnits, f.remaining)
	t.Logf("audit:\n%s", audit)
	if paidUnits != stock {
		t.Errorf("paid units %d, want the whole stock %d", paidUnits, stock)
	}
	if byStatus[events.Confirmed] != 0 {
		t.Errorf("%d orders are still confirmed, past their window", byStatus[events.Confirmed])
	}
	if byStatus[events.Expired] == 0 || late == 0 && byStatus[events.Expired] == 0 {
		t.Errorf("no order expired: the story did not test the window")
	}
	if kills == 0 {
		t.Errorf("the compensator was never killed mid-expiry")
	}
	if !strings.Contains(audit, "I6 paid or expired") {
		t.Errorf("the audit does not check I6:\n%s", audit)
	}

	// A paid order refunded, then its payment replayed: refused, and its unit is back on sale.
	for id, o := range f.orders {
		if o.Status != events.Paid {
			continue
		}
		if a := c.asAdmin(t, "POST", "/v1/admin/orders/"+id+"/compensate", ""); a.status != http.StatusOK {
			t.Fatalf("refund a paid order: %+v", a)
		}
		if a := c.asAdmin(t, "POST", "/v1/admin/orders/"+id+"/payment", `{"payment_id": "`+o.PaymentID+`"}`); a.status != http.StatusConflict || a.code != "order_not_payable" {
			t.Errorf("a payment replayed after the refund answered %d %s, want 409 order_not_payable", a.status, a.code)
		}
		c.settle(t, campaign, 30*time.Second)
		if f := c.checkFinal(t, campaign); f.remaining != 1 || f.orders[id].Status != events.Refunded {
			t.Errorf("after the refund: remaining %d, the order %s", f.remaining, f.orders[id].Status)
		}
		c.audit(t, campaign)
		break
	}
}

// asAdmin sends an admin request with a JSON body to the first api.
func (c *cluster) asAdmin(t *testing.T, method, path, body string) answer {
	t.Helper()
	return c.send(context.Background(), method, c.base+path, body, "Authorization", "Bearer "+c.admin)
}

// waitConfirmed waits until the store holds the order, and returns it.
func (c *cluster) waitConfirmed(t *testing.T, orderID string) store.Order {
	t.Helper()
	var o store.Order
	eventually(t, 30*time.Second, "order "+orderID+" is confirmed", func() bool {
		var err error
		o, err = c.store.Order(context.Background(), orderID)
		return err == nil && o.Status != ""
	})
	return o
}

package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ConfirmBatch is how many orders one confirm call takes at most.
const ConfirmBatch = confirmBatch

// ConfirmReplies runs the confirm script once over orderIDs, all of campaign, and returns each
// order's {outcome, state}, flattened, as the old one-order script replied (outcome "malformed"
// with the error for a record it cannot parse, where the old script failed).
func ConfirmReplies(ctx context.Context, rdb redis.Scripter, campaign string, orderIDs []string) ([]string, error) {
	k := KeysOf(campaign)
	v, err := confirmScript.Run(ctx, rdb, []string{k.Res, k.Pending}, orderIDs).Slice()
	if err != nil {
		return nil, err
	}
	outcomes, err := confirmOutcomes(v, len(orderIDs))
	if err != nil {
		return nil, err
	}
	var pairs []string
	for _, o := range outcomes {
		pairs = append(pairs, o.outcome, o.state)
	}
	return pairs, nil
}

// Purchase is one purchase for ReserveReplies.
type Purchase struct {
	OrderID, User string
	Qty           int
}

// ReserveReplies runs the reserve script once over purchases, all of campaign, and returns each
// one's reply as "status remaining deadline record".
func ReserveReplies(ctx context.Context, rdb redis.Scripter, campaign string, ttl time.Duration, purchases []Purchase) ([]string, error) {
	ps := make([]*purchase, len(purchases))
	for i, p := range purchases {
		ps[i] = &purchase{campaign: campaign, orderID: p.OrderID, user: p.User, qty: p.Qty, ttlMs: ttl.Milliseconds()}
	}
	v, err := reserveCall(ctx, rdb, ps).reply(ctx, rdb)
	replies, err := reserveReplies(v, err, len(ps))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(replies))
	for i, v := range replies {
		out[i] = fmt.Sprintf("%s %d %d %s", v.status, v.remaining, v.deadline, v.record)
	}
	return out, nil
}

// ReserveRaw runs the reserve script over one purchase whose quantity is the raw argument
// given, as a caller other than Reserve could pass it, and returns the purchase's status.
func ReserveRaw(ctx context.Context, rdb redis.Scripter, campaign string, ttl time.Duration, orderID, user, qty string) (string, error) {
	k := KeysOf(campaign)
	v, err := reserveScript.Run(ctx, rdb, []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta}, ttl.Milliseconds(), orderID, user, qty).Slice()
	if err != nil {
		return "", err
	}
	if len(v) != 4 {
		return "", fmt.Errorf("unexpected reply %v to one purchase", v)
	}
	status, _ := v[0].(string)
	return status, nil
}

package lua

import (
	"context"

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

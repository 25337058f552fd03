package lua

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ConfirmBatch is how many orders one confirm call takes at most.
const ConfirmBatch = confirmBatch

// ConfirmReplies runs the confirm script once over orderIDs, all of campaign, and returns its
// reply: {outcome, state} per order, flattened.
func ConfirmReplies(ctx context.Context, rdb redis.Scripter, campaign string, orderIDs []string) ([]string, error) {
	k := KeysOf(campaign)
	return confirmScript.Run(ctx, rdb, []string{k.Res, k.Pending}, orderIDs).StringSlice()
}

package compensator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// failingSnapshots does to campaign bad what failure says before the rebuild restores it.
type failingSnapshots struct {
	compensator.Snapshotter
	bad     string
	failure func(ctx context.Context, campaign string) error
}

func (s failingSnapshots) WhileHeld(ctx context.Context, campaign string, endedSince time.Time, fn func(store.Held) error) error {
	if campaign == s.bad {
		if err := s.failure(ctx, campaign); err != nil {
			return err
		}
	}
	return s.Snapshotter.WhileHeld(ctx, campaign, endedSince, fn)
}

var errUnreadable = errors.New("the store cannot read the campaign right now")

// TestRebuildRestoresTheOthersPastOneNotItsOwn: a rebuild froze two campaigns, and the first
// could not be restored when its turn came: it no longer held the rebuild's mark (the sweeper
// dropped its keys, retired meanwhile, or another rebuild froze it again), or the store could
// not read it. The rebuild returned there, and the second campaign, which nobody else had
// frozen, stayed frozen, its buyers refused, until a later guard round froze it again and
// waited out a whole rebuild's grace and the consumer once more.
func TestRebuildRestoresTheOthersPastOneNotItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failure func(e *env) func(ctx context.Context, campaign string) error
		wantErr error
	}{
		{"not its own", func(e *env) func(ctx context.Context, campaign string) error {
			return func(ctx context.Context, campaign string) error { // as the sweeper's drop
				return e.r.Client().Del(ctx, lua.KeysOf(campaign).All()...).Err()
			}
		}, nil},
		{"unreadable", func(*env) func(ctx context.Context, campaign string) error {
			return func(context.Context, string) error { return errUnreadable }
		}, errUnreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 5)
			other := e.addCampaign(t, 10, 5, 0)
			c := e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
			compensator.SetSnapshots(c, failingSnapshots{Snapshotter: e.st, bad: e.campaign, failure: tc.failure(e)})
			if err := c.Rebuild(e.ctx, []string{e.campaign, other}); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("rebuild: %v, want %v", err, tc.wantErr)
			}
			gens, err := e.r.Generations(e.ctx, []string{other})
			if err != nil {
				t.Fatal(err)
			}
			if g := gens[other]; g.Frozen || g.Lost() {
				t.Errorf("the second campaign after the rebuild: %+v; want it restored and on sale", g)
			}
		})
	}
}

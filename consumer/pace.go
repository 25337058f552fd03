package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/time/rate"
)

// pace is one member's share of the group's controlled pace (Config.MaxRate): the pace protects
// the database, which every member writes to, so the members' paces must add up to MaxRate
// however many there are. Each paces at MaxRate × the partitions of the requested topic it owns
// ÷ the topic's partitions: purchases are spread evenly over the partitions (the api places
// each on the partition of least backlog, events.Topics.Partitioner), so a member's share of
// the work is its share of the partitions, and a member that owns them all (alone, or after the
// others died) gets the whole pace. The group client calls assigned after every rebalance and
// gone when partitions go, so the share follows the assignment.
type pace struct {
	rate  int // Config.MaxRate; 0: unpaced
	batch int // Config.BatchSize
	topic string
	log   *slog.Logger
	lim   *rate.Limiter

	mu    sync.Mutex
	owned map[int32]bool
	total int // the topic's partitions, as Kafka last told them
}

// metadataTimeout bounds the question an assignment asks Kafka: the group's polls wait for the
// assignment callback, and a Close waits for it too.
const metadataTimeout = 10 * time.Second

func newPace(cfg Config) *pace {
	p := &pace{rate: cfg.MaxRate, batch: cfg.BatchSize, topic: cfg.Topics.Requested, log: cfg.Logger, owned: map[int32]bool{}}
	if cfg.MaxRate == 0 {
		p.lim = rate.NewLimiter(rate.Inf, cfg.BatchSize)
		return p
	}
	// The whole pace until the first assignment, which always comes before a partition is
	// fetched: this one never paces a batch, it only keeps the limiter usable.
	p.lim = rate.NewLimiter(rate.Limit(cfg.MaxRate), min(cfg.BatchSize, cfg.MaxRate))
	return p
}

// wait blocks until n more events may be persisted, or stop is done. n may be more than the
// burst: the batch was sized by batchSize before its poll, and franz-go runs the group's
// callbacks before and while a poll waits, so a rebalance may have shrunk the share since (a
// member joining takes partitions from this one). Such a batch is waited for a burst at a
// time, at the new pace: the limiter's WaitN would refuse it, and the refusal would end Run.
func (p *pace) wait(stop context.Context, n int) error {
	for n > 0 {
		if err := stop.Err(); err != nil {
			return err
		}
		// Under mu, which set holds too: the burst cannot shrink between reading it and the
		// reservation, so the reservation is always granted.
		p.mu.Lock()
		k := min(n, p.lim.Burst())
		r := p.lim.ReserveN(time.Now(), k)
		p.mu.Unlock()
		if d := r.Delay(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-stop.Done():
				t.Stop()
				r.Cancel()
				return stop.Err()
			case <-t.C:
			}
		}
		n -= k
	}
	return nil
}

// batchSize is the most events of the next batch: a batch waits for its whole size at once, so
// none may be larger than a second of this member's share (the burst), or the wait would hold
// the group's rebalances with it.
func (p *pace) batchSize() int { return p.lim.Burst() }

// assigned is the group client's OnPartitionsAssigned (of a paced consumer): added joins the partitions owned, and the
// topic's partition count is asked again, since the rebalance may be the one that follows the
// topic's growth.
func (p *pace) assigned(ctx context.Context, cl *kgo.Client, added map[string][]int32) {
	total, err := partitions(ctx, cl, p.topic)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, part := range added[p.topic] {
		p.owned[part] = true
	}
	if err != nil {
		p.log.Warn("partition count unknown; pacing on the last one known", "topic", p.topic, "partitions", p.total, "err", err)
	} else {
		p.total = total
	}
	p.set()
}

// gone is told of the partitions the member gave up or lost.
func (p *pace) gone(ps map[string][]int32) {
	if p.rate == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, part := range ps[p.topic] {
		delete(p.owned, part)
	}
	p.set()
}

// set gives the limiter the share of the partitions owned. With none it keeps the last share:
// nothing is fetched to persist, and a burst of 0 would make a batch of 0, which PollRecords
// takes as no bound at all.
func (p *pace) set() {
	if len(p.owned) == 0 {
		return
	}
	total := p.total
	for part := range p.owned {
		// A count asked before the topic grew (or never learned) is at least what we own.
		total = max(total, int(part)+1)
	}
	share := float64(p.rate) * float64(len(p.owned)) / float64(total)
	p.lim.SetLimit(rate.Limit(share))
	p.lim.SetBurst(min(p.batch, max(1, int(share))))
	p.log.Info("pacing at this member's share of the group's max rate", "topic", p.topic, "partitions_owned", len(p.owned), "partitions", total, "max_rate", share)
}

// partitions asks Kafka how many partitions topic has. Not kadm's ListTopics: it answers from a
// cache up to 5 s old, which can predate the growth whose rebalance is being handled.
func partitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	// Asked again until the bound while Kafka refuses (a leader election in a broker's restart):
	// a member's first assignment has nothing to fall back on but the partitions it owns, which
	// can make its share the whole group's pace.
	for {
		n, err := askPartitions(ctx, cl, topic)
		if err == nil {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(metadataRetry):
		}
	}
}

// metadataRetry spaces partitions' questions.
const metadataRetry = 250 * time.Millisecond

func askPartitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, fmt.Errorf("metadata of %s: %w", topic, err)
		}
		return len(t.Partitions), nil
	}
	return 0, fmt.Errorf("metadata of %s: topic missing from the answer", topic)
}

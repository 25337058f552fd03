package consumer_test

import (
	"strings"
	"testing"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestPoisonWithALargeReasonIsDeadLettered: a poison record of 300 kB (a third of what any
// producer takes) whose order id is 300,000 DEL bytes. Validate quotes the order id in its
// reason, and %q writes each DEL as \x7f: the reason header was 1.2 MB, so the dead letter was
// too large with its value and still too large without it, retried for ever with nothing
// behind it committed. The reason is cut to a kilobyte.
func TestPoisonWithALargeReasonIsDeadLettered(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		st := storetest.MustOpen(t, storetest.SQLiteURL(t))
		campaign := openCampaign(t, st, "reason", 10, 2, false)
		topics := kafkatest.Topics(t, brokers)
		poison := `{"type":"OrderRequested","version":1,"event_id":"e","order_id":"` + campaign + `.` +
			strings.Repeat("\x7f", 300_000) + `","campaign_id":"other","user_id":"u","quantity":1}`
		adm := produceBehindPoison(t, brokers, topics, []byte(poison), campaign, "ann")

		runConsumer(t, consumer.Config{Brokers: brokers, Topics: topics}, st)

		waitCommitted(t, adm, topics, "the 300 kB poison record blocks its partition")
	})
}

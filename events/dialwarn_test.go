package events

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDialWarnerQuietOnClose: a dial its own client's Close cut short says nothing of the
// broker. seckill dev stopped at start (a port it may not bind) warned "cannot reach a Kafka
// broker; retrying" err="client closed" of the embedded Kafka it had just stopped using.
func TestDialWarnerQuietOnClose(t *testing.T) {
	var logged bytes.Buffer
	w := &dialWarner{log: slog.New(slog.NewTextHandler(&logged, nil))}
	w.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}, 0, nil, kgo.ErrClientClosed)
	if logged.Len() > 0 {
		t.Errorf("a dial cut short by the client's Close: %s", logged.String())
	}
}

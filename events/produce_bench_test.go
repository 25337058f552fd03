package events_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// BenchmarkProduce produces OrderRequested-sized records from 256 goroutines at once, each
// waiting for its acknowledgement as the api does, into topics of 1, 3 and 12 partitions on the
// real test broker: side by side, what the partition count costs the api's wait and the
// broker's CPU. With SECKILL_BENCH_KAFKA_PID set (the broker's pid, e.g.
// $(cat .seckill-services/kafka/kafka.pid)), it also reports the broker's CPU per record.
func BenchmarkProduce(b *testing.B) {
	brokers := kafkatest.Real(b)
	pid := os.Getenv("SECKILL_BENCH_KAFKA_PID")
	ev := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(),
		OccurredAt: time.Now().UTC(), OrderID: events.NewOrderID("bench"), CampaignID: "bench",
		UserID: "bench-user-000000", Quantity: 1, Deadline: time.Now().Add(2 * time.Minute).UTC()}
	value, err := events.Encode(ev)
	if err != nil {
		b.Fatal(err)
	}
	for _, partitions := range []int32{1, 3, 12} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			topic := "bench-produce-" + strings.ToLower(events.NewID())
			cl := kafkatest.Client(b, brokers)
			adm := kadm.NewClient(cl)
			ctx := context.Background()
			if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
				b.Fatal(err)
			}
			defer adm.DeleteTopics(ctx, topic)
			// Warm the client's metadata and the producer id.
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value}).FirstErr(); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			cpu0 := procCPU(b, pid)
			b.SetParallelism(max(1, 256/runtime.GOMAXPROCS(0))) // 256 producers, as the bench's connections
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := strconv.FormatInt(n.Add(1), 10)
					r := &kgo.Record{Topic: topic, Key: []byte("bench/" + k), Value: value}
					if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			if pid != "" {
				b.ReportMetric(float64((procCPU(b, pid)-cpu0).Microseconds())/float64(b.N), "broker-µs/record")
			}
		})
	}
}

// procCPU returns the user+system CPU time process pid has used ("" gives 0).
func procCPU(tb testing.TB, pid string) time.Duration {
	if pid == "" {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name, which is parenthesised and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

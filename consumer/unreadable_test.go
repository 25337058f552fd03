package consumer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestCompressionBombIsDeadLettered: a record batch that decompresses to more than franz-go
// takes (1 GiB, kgo.MaxDecompressBatchBytes: here one zstd-compressed record of zeros of
// some 100 KB on the wire, which a producer other than seckill's can write and Kafka keeps)
// is poison. franz-go stops fetching its partition until it is moved past the batch; the
// consumer logged "fetch failed" once a minute while every order behind it waited, to be
// failed by the sweeper at its deadline. It is dead-lettered, with where it is and why, and
// the orders behind it are stored and committed.
func TestCompressionBombIsDeadLettered(t *testing.T) {
	ctx := context.Background()
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	campaign := openCampaign(t, st, "bomb", 10, 2, false)
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	// Bob's order goes first: the partition is one the group is consuming.
	bob, ann := orderEvent(campaign, "bob", 1), orderEvent(campaign, "ann", 1)
	produceOn := func(e events.Event) {
		t.Helper()
		rec, err := events.Record(topics.Requested, e)
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = 0
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produceOn(bob)
	runConsumer(t, consumer.Config{Brokers: brokers, Topics: topics}, st)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := st.Order(ctx, bob.OrderID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Bob's order is not stored after 10s")
		}
	}
	produceRawBatch(t, cl, topics.Requested, 0, zstdBomb(t, 1<<30+1<<20))
	produceOn(ann)

	// Reading the bomb decompresses a gigabyte before franz-go gives up on it: some 40 s under
	// the race detector on two cores, and a minute when another package's tests share them.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := st.Order(ctx, ann.OrderID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after 2m Ann's order behind the batch no reader can decompress is not stored: the partition is stalled")
		}
	}
	waitCommitted(t, kadm.NewClient(cl), topics, "the batch no reader can decompress was not committed past")
	dl := deadLetters(t, brokers, topics.DLQ, 1)
	reason := events.Header(dl[0], events.HeaderReason)
	if !strings.HasPrefix(reason, events.ReasonPoison) || !strings.Contains(reason, "decompresses to more than") ||
		events.Header(dl[0], events.HeaderSourcePartition) != "0" || events.Header(dl[0], events.HeaderSourceOffset) != "1" {
		t.Errorf("dead letter with headers %v, want the poison batch at partition 0, offset 1, and why", dl[0].Headers)
	}
}

// zstdBomb is a record batch of one record whose value is size zero bytes, compressed with zstd.
func zstdBomb(t *testing.T, size int) []byte {
	t.Helper()
	body := []byte{0}                    // attributes
	body = binary.AppendVarint(body, 0)  // timestamp delta
	body = binary.AppendVarint(body, 0)  // offset delta
	body = binary.AppendVarint(body, -1) // no key
	body = binary.AppendVarint(body, int64(size))
	headers := binary.AppendVarint(nil, 0)
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(binary.AppendVarint(nil, int64(len(body)+size+len(headers))))
	enc.Write(body)
	zeros := make([]byte, 1<<20)
	for n := 0; n < size; n += len(zeros) {
		enc.Write(zeros[:min(len(zeros), size-n)])
	}
	enc.Write(headers)
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 4, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: buf.Bytes()}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))                                          // the length after itself
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli))) // from the attributes on
	return raw
}

// produceRawBatch writes the record batch raw to partition of topic as it is.
func produceRawBatch(t *testing.T, cl *kgo.Client, topic string, partition int32, raw []byte) {
	t.Helper()
	ctx := context.Background()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, tds[topic].ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("produce the raw batch: error code %d", code)
	}
}

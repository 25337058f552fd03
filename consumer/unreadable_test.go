package consumer_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

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
// some 32 KB on the wire, which a producer other than seckill's can write and Kafka keeps)
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := st.Order(ctx, bob.OrderID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Bob's order is not stored after 30s")
		}
	}
	produceRawBatch(t, cl, topics.Requested, 0, zstdBomb(t, 1<<30+1<<20))
	produceOn(ann)

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := st.Order(ctx, ann.OrderID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after 30s Ann's order behind the batch no reader can decompress is not stored: the partition is stalled")
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
// The frame is written by hand, the zeros as run-length blocks, and declares its content size:
// compressing a gigabyte took 9 s under the race detector, and a reader that learned the size
// only by decompressing it another 30, for no more than what the consumer does with the batch.
func zstdBomb(t *testing.T, size int) []byte {
	t.Helper()
	record := []byte{0}                      // attributes
	record = binary.AppendVarint(record, 0)  // timestamp delta
	record = binary.AppendVarint(record, 0)  // offset delta
	record = binary.AppendVarint(record, -1) // no key
	record = binary.AppendVarint(record, int64(size))
	const headers = 1 // no headers: the varint 0, one more zero after the value's
	prefix := binary.AppendVarint(nil, int64(len(record)+size+headers))
	prefix = append(prefix, record...)
	zeros := size + headers

	// RFC 8878: the magic number; a header with an 8-byte content size and a 128 KiB window;
	// then blocks, each a 3-byte header (last block, type, size) and its content.
	frame := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	frame = append(frame, 0xC0, 0x38)
	frame = binary.LittleEndian.AppendUint64(frame, uint64(len(prefix)+zeros))
	block := func(typ, n int, last bool) {
		h := typ<<1 | n<<3
		if last {
			h |= 1
		}
		frame = append(frame, byte(h), byte(h>>8), byte(h>>16))
	}
	const rawBlock, rleBlock, most = 0, 1, 128 << 10
	block(rawBlock, len(prefix), false)
	frame = append(frame, prefix...)
	for left := zeros; left > 0; {
		n := min(left, most)
		left -= n
		block(rleBlock, n, left == 0)
		frame = append(frame, 0)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 4, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: frame}
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

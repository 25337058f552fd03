package compensator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
)

// TestLogLinesNameTheirTopicOnce: the compensator's logger for its dead-letter loop carried the
// topic, and the loop's own lines ("topic missing", "fetch failed") name the topic they are
// about, so those JSON lines held "topic" twice: a duplicate key, which many log pipelines
// reject or mangle. Here the DLQ topic does not exist: every line logged while the compensator
// waits for it holds each key once, and the warning still names the topic.
func TestLogLinesNameTheirTopicOnce(t *testing.T) {
	e := newEnv(t, 10, 1)
	// A file: the client's goroutines write it while the test reads, with no buffer to share.
	out, err := os.Create(filepath.Join(t.TempDir(), "compensator.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	topics := e.topics
	topics.DLQ = events.NewTopics("t" + strings.ToLower(events.NewID())).DLQ // never created
	c, err := compensator.New(compensator.Config{Brokers: e.brokers, Topics: topics, GuardInterval: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(out, nil))}, e.st, e.r)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var logged []byte
	for deadline := time.Now().Add(20 * time.Second); !bytes.Contains(logged, []byte("topic missing")); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s no \"topic missing\" line; logged %s", logged)
		}
		if logged, err = os.ReadFile(out.Name()); err != nil {
			t.Fatal(err)
		}
	}
	lines := bytes.Split(logged, []byte("\n"))
	for _, line := range lines[:len(lines)-1] { // the last is after the last newline: partial

		if k, err := duplicateKey(line); err != nil || k != "" {
			t.Errorf("logged %s: duplicate key %q (%v)", line, k, err)
		}
		if bytes.Contains(line, []byte("topic missing")) && !bytes.Contains(line, []byte(topics.DLQ)) {
			t.Errorf("logged %s, want it to name %s", line, topics.DLQ)
		}
	}
}

// TestUnreadableDeadLetterNamesWhereItIs: the warning for a dead letter the compensator cannot
// read named its offset alone, so the operator could not find it (dlq show P/O) without
// guessing the topic and partition. It names all three, each once.
func TestUnreadableDeadLetterNamesWhereItIs(t *testing.T) {
	e := newEnv(t, 10, 1)
	out, err := os.Create(filepath.Join(t.TempDir(), "compensator.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cl, err := events.NewClient(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	src := &kgo.Record{Topic: e.topics.Requested, Key: []byte(e.campaign + "/ann"), Value: []byte(`{"version":2}`)}
	letter := events.DeadLetter(e.topics.DLQ, src, events.ReasonPoison+": unknown version 2")
	if err := cl.ProduceSync(e.ctx, letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour, SweepInterval: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(out, nil))})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const msg = "unreadable dead letter left to the sweeper"
	var line []byte
	for deadline := time.Now().Add(20 * time.Second); line == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s no %q line", msg)
		}
		logged, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.Split(logged, []byte("\n")) {
			if bytes.Contains(l, []byte(msg)) && bytes.HasSuffix(l, []byte("}")) {
				line = l
			}
		}
	}
	if k, err := duplicateKey(line); err != nil || k != "" {
		t.Errorf("logged %s: duplicate key %q (%v)", line, k, err)
	}
	var got struct {
		Topic     string `json:"topic"`
		Partition *int32 `json:"partition"`
		Offset    *int64 `json:"offset"`
	}
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatal(err)
	}
	if got.Topic != letter.Topic || got.Partition == nil || *got.Partition != letter.Partition || got.Offset == nil || *got.Offset != letter.Offset {
		t.Errorf("logged %s, want topic %s, partition %d and offset %d", line, letter.Topic, letter.Partition, letter.Offset)
	}
}

// TestDuplicateKey: the check above finds a duplicate at any depth, and only a duplicate.
func TestDuplicateKey(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}],"d":"a"}`: "",
		`{"topic":"x","msg":"m","topic":"x"}`:               "topic",
		`{"a":{"b":1,"b":2}}`:                               "b",
		`{"a":[{"b":1}],"a":2}`:                             "a",
		`{"a":{"b":{}},"c":{"b":[]}}`:                       "",
	} {
		if got, err := duplicateKey([]byte(doc)); got != want || err != nil {
			t.Errorf("duplicateKey(%s) = %q, %v; want %q", doc, got, err, want)
		}
	}
}

// duplicateKey returns the first key that a JSON object in doc holds twice, at any depth:
// encoding/json keeps the last value of a duplicate without a word, so it walks the tokens.
func duplicateKey(doc []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	// One frame for each array or object open; an object's holds its keys, an array's none.
	type frame struct {
		keys  map[string]bool
		value bool // the object's next token is the value of its last key
	}
	var open []*frame
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		var in *frame
		if len(open) > 0 {
			in = open[len(open)-1]
		}
		if k, ok := tok.(string); ok && in != nil && in.keys != nil && !in.value {
			if in.keys[k] {
				return k, nil
			}
			in.keys[k], in.value = true, true
			continue
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, &frame{keys: map[string]bool{}})
			continue // the frame's parent has its value when the frame closes
		case json.Delim('['):
			open = append(open, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
		if len(open) > 0 { // a value done: the object it belongs to wants a key next
			open[len(open)-1].value = false
		}
	}
}

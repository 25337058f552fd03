package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/seckill/seckill/events"
)

// FuzzQuickQuantity: whenever the fast path reads a body, the strict decoder reads the same
// quantity from it without complaint.
func FuzzQuickQuantity(f *testing.F) {
	for _, s := range []string{`{"quantity":1}`, ` { "quantity" : 42 } `, "{\"quantity\":\t7}\n", `{"quantity":0}`,
		`{"quantity":01}`, `{"quantity":1.5}`, `{"quantity":1,"x":2}`, `{"Quantity":3}`, `{"quantity":999999999}`,
		`{"quantity":1000000000}`, `{"quantity":-1}`, `{"quantity":"1"}`, `{"quantity":1}{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		q, ok := quickQuantity(body)
		if !ok {
			return
		}
		var req purchaseRequest
		if err := decodeJSON(body, &req); err != nil {
			t.Fatalf("fast path read %d from %q, the strict decoder refuses it: %v", q, body, err)
		}
		strict, err := req.quantity()
		if err != nil || strict != q {
			t.Fatalf("fast path read %d from %q, the strict decoder %d (%v)", q, body, strict, err)
		}
	})
}

func TestQuickQuantity(t *testing.T) {
	for body, want := range map[string]int{`{"quantity":1}`: 1, ` { "quantity" : 42 } `: 42, `{"quantity":999999999}`: 999999999} {
		if q, ok := quickQuantity([]byte(body)); !ok || q != want {
			t.Errorf("quickQuantity(%q) = %d, %v; want %d", body, q, ok, want)
		}
	}
	for _, body := range []string{`{"quantity":0}`, `{"quantity":01}`, `{"quantity":1.5}`, `{"quantity":1,"x":2}`,
		`{"Quantity":3}`, `{"quantity":1000000000}`, `{"quantity":-1}`, `{"quantity":1}{}`, ``} {
		if q, ok := quickQuantity([]byte(body)); ok {
			t.Errorf("quickQuantity(%q) = %d: should be left to the strict decoder", body, q)
		}
	}
}

// FuzzSoldOutMessage: the remembered sold-out refusal is the one for this campaign and quantity.
func FuzzSoldOutMessage(f *testing.F) {
	f.Add("camp-1", 1)
	f.Add("a\"b\x00é\xff", -5)
	f.Fuzz(func(t *testing.T, campaign string, qty int) {
		want := fmt.Sprintf("campaign %q has fewer than %d units left", campaign, qty)
		if got := events.ErrorMessage(soldOutError(campaign, qty)); got != want {
			t.Fatalf("message %q, fmt %q", got, want)
		}
	})
}

// FuzzReadAtMost: readAtMost reads what io.ReadAll of an io.LimitReader(max+1) reads, whatever
// the Content-Length claims and however the reader splits its data.
func FuzzReadAtMost(f *testing.F) {
	for _, n := range []int{0, 1, 14, 511, 512, 513, maxBody, maxBody + 1, 3 * maxBody} {
		f.Add(n, int64(n), false, false)
		f.Add(n, int64(-1), true, false)
		f.Add(n, int64(n+1), false, true)
	}
	f.Fuzz(func(t *testing.T, n int, size int64, oneByte, fail bool) {
		if n < 0 || n > 4*maxBody {
			return
		}
		data := bytes.Repeat([]byte("x"), n)
		reader := func() io.Reader {
			var r io.Reader = bytes.NewReader(data)
			if fail {
				r = io.MultiReader(r, iotest.ErrReader(errors.New("boom")))
			}
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			return r
		}
		want, wantErr := io.ReadAll(io.LimitReader(reader(), maxBody+1))
		got, err := readAtMost(reader(), maxBody, size)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) && !(len(got) > maxBody && len(want) > maxBody) {
			t.Fatalf("n %d size %d: read %d bytes, %v; io.ReadAll %d, %v", n, size, len(got), err, len(want), wantErr)
		}
	})
}

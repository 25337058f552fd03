package lua

import (
	"reflect"
	"testing"
)

func TestConfirmOutcomes(t *testing.T) {
	got, err := confirmOutcomes([]any{int64(2), int64(2), "unchanged", "released", int64(4), "unknown", ""}, 4)
	want := []confirmOutcome{{"done", "confirmed"}, {"unchanged", "released"}, {"done", "confirmed"}, {"unknown", ""}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("confirmOutcomes = %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]any{
		{},
		{"1"},
		{int64(2)},                          // counts one order too many
		{int64(0), int64(1), "unknown"},     // a listed order cut short
		{int64(0), int64(2), "unknown", ""}, // position past the batch
		{int64(0), int64(0), "unknown", ""}, // position before it
		{int64(-1), int64(1), "unknown", "", int64(1), "unknown", ""}, // listed twice
	} {
		if got, err := confirmOutcomes(bad, 1); err == nil {
			t.Errorf("confirmOutcomes(%v, 1) = %v, want an error", bad, got)
		}
	}
}

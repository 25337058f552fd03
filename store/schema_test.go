package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestCheckSchema: a database never migrated, and one an earlier release migrated, are behind
// this build, each saying its version and what to run; a migrated one is not.
func TestCheckSchema(t *testing.T) {
	storetest.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		behind := func(version int) {
			t.Helper()
			err := s.CheckSchema(ctx)
			want := fmt.Sprintf("at version %d, this seckill needs %d; run seckill migrate", version, store.Migrations())
			if !errors.Is(err, store.ErrSchemaBehind) || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckSchema at version %d: %v, want ErrSchemaBehind saying %q", version, err, want)
			}
		}
		behind(0)
		if err := store.MigrateTo(ctx, s, store.Migrations()-1); err != nil {
			t.Fatal(err)
		}
		behind(store.Migrations() - 1)
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.CheckSchema(ctx); err != nil {
			t.Errorf("CheckSchema after Migrate: %v", err)
		}
	})
}

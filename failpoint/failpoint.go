// Package failpoint lets the fault tests kill a process at the worst moments. The points are
// compiled in only under the build tag "failpoints" (go build -tags failpoints); in every other
// build Inject is an empty function that the compiler removes.
//
// Under the tag, SECKILL_FAILPOINTS configures the points as a comma-separated list of
// name=probability, for example "api.after-produce=0.2,consumer.after-store-commit=0.5": each
// time the named point is reached, the process sends itself SIGKILL with that probability,
// exactly as kill -9 would, without a chance to clean up.
package failpoint

// Points named in the code.
const (
	APIBeforeProduce         = "api.before-produce"          // reserved in Redis, event not yet produced
	APIAfterProduce          = "api.after-produce"           // event acknowledged, buyer not yet answered
	StoreBeforeConfirmCommit = "store.before-confirm-commit" // a batch written, its transaction not committed
	ConsumerAfterStoreCommit = "consumer.after-store-commit" // the batch committed, Redis and offsets not
	CompensatorMidExpiry     = "compensator.mid-expiry"      // an unpaid order expired in the store, its units not yet back
)

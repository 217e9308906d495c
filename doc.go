// Package pace answers "may this key make one more request now?" in tens of
// nanoseconds, with memory bounded by the keys that actually took, not by
// the keys that were named.
//
// [Pace] ([New]) is a keyed pace of N events per second per key, in process
// memory: [Pace.Reserve] debits one event and decides in one step,
// [Reservation.Return] gives it back when the request is rejected for
// another reason, and [Pace.Allow] is a Reserve never given back. [Shared]
// ([NewShared]) is the same pace kept in a Store, so that every replica of a
// service shares one pace per key, with more quotas per key ([WithQuota])
// and a per-replica fallback ([WithFallback]).
//
// [Store] is the interface for state shared across processes: token buckets,
// connection slots with a sustained/ceiling burst model, and memoised
// values. Package memory implements it in process, the nested modules
// redisstore and pgstore on Redis and PostgreSQL. [Memo] ([NewMemo]) loads a
// value once and memoises it in a Store. [WithFailurePolicy] wraps a Store
// so that a backend that fails makes an explicit fail-open or fail-closed
// decision.
//
// Invalid arguments and configuration are errors wrapping
// [ErrInvalidArgument], never a panic; being limited is not an error. The
// long story is in the repository's docs/ (pace.md, store.md, replicas.md,
// metrics.md).
//
// # For Store implementers
//
// A Store is the seed's eleven methods; [Shared] also needs the take methods
// of driver.Taker. Package driver holds the kit: the token-bucket
// arithmetic every backend decides with, the Grant and Receipt of a take,
// and the validators. [BurstSlotState], [AdmitBurst], [AssessBurst],
// [RefreshBurst] and [ReleaseBurst] (over [BurstRefillWindow]) are the burst
// arithmetic. Package storetest checks an implementation against the
// contract (docs/store.md).
package pace

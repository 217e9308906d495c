// Package driver is the kit for implementers of a pace.Store and of Taker,
// the take methods pace.Shared needs: the token-bucket arithmetic every
// backend mirrors (Shape, TakeAll, RemainingAll, RefundAll), the Grant and
// Receipt a take reports, and the validators every implementation calls
// before it touches its backend, so that all of them reject the same calls
// with the same errors.
//
// Users of pace never import it: it is to pace what database/sql/driver is
// to database/sql. Errors wrap pace.ErrInvalidArgument (the same value, so
// errors.Is works with either package's name). The arithmetic and its proof
// are in docs/store.md; package storetest checks an implementation.
package driver

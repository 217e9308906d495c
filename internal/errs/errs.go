// Package errs holds the sentinel errors of package pace, so that package
// driver (which pace imports) can wrap the very same values.
package errs

import "errors"

// The sentinels, exported by package pace as ErrInvalidArgument, ErrNotFound
// and ErrClosed.
var (
	ErrInvalidArgument = errors.New("pace: invalid argument")
	ErrNotFound        = errors.New("pace: key not found")
	ErrClosed          = errors.New("pace: store closed")
)

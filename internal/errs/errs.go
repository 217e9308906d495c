// Package errs holds the sentinel errors of package pace, so that package
// driver (which pace imports) can wrap the very same values.
package errs

import "errors"

// The sentinels, exported by package pace as ErrInvalidArgument, ErrNotFound
// and ErrClosed.
var (
	InvalidArgument = errors.New("pace: invalid argument")
	NotFound        = errors.New("pace: key not found")
	Closed          = errors.New("pace: store closed")
)

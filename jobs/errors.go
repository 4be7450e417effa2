package jobs

import "errors"

// ErrPermanent is matched by every error Permanent returns.
var ErrPermanent = errors.New("permanent error")

// Permanent marks err as permanent: retrying cannot help (a parse error in the data, a record
// that breaks the job's rules). A Map step that returns it fails its shard at once, without
// the retries a transient error gets, and the job fails naming the shard and err. Permanent(nil)
// is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// PermanentError is an error marked by Permanent. It matches ErrPermanent and unwraps to Err.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the error marked permanent.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

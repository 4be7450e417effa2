package jobs

import "errors"

// Errors of jobs, typed or byte-level. Each is matched with errors.Is.
var (
	// ErrBadParams is matched by every *ParamError: a job's parameters were refused.
	ErrBadParams = errors.New("bad job parameters")
	// ErrBadShard is matched by the errors Map returns for a shard description it cannot decode.
	ErrBadShard = errors.New("bad shard")
	// ErrBadPartial is matched by the errors Aggregate.Merge returns for a partial it cannot
	// decode. Merge changes nothing when it fails.
	ErrBadPartial = errors.New("bad partial")
)

// ParamError says which parameter of a job was refused and why. It matches ErrBadParams.
type ParamError struct {
	Job    string // the job type, e.g. "primes"
	Field  string // the JSON field at fault; "" when the parameters as a whole are wrong
	Reason string // what is wrong and what is allowed, e.g. `"shards" must be at least 1 (got 0)`
}

func (e *ParamError) Error() string {
	return "bad parameters for " + e.Job + ": " + e.Reason
}

// Is reports whether target is ErrBadParams.
func (e *ParamError) Is(target error) bool { return target == ErrBadParams }

// ErrBadCheckpoint is matched by the errors Aggregate.UnmarshalBinary returns for data it cannot
// restore (and by the errors of the cluster's own checkpoint decoders).
var ErrBadCheckpoint = errors.New("bad checkpoint")

package node

import (
	"errors"
	"flag"
	"fmt"

	"github.com/mapagg/mapagg/client"
)

// ErrNoWorkers is returned when a command needs the running cluster's answer (submit of a type this
// binary does not have, types) and no worker answers on NATS.
// It is client.ErrNoWorkers.
var ErrNoWorkers = client.ErrNoWorkers

// ErrInvalidConfig is matched by every error Config.Validate and Options.Validate return.
var ErrInvalidConfig = errors.New("node: invalid config")

// errUsage marks a mistake in the command line or its input (exit status 2).
var errUsage = errors.New("usage")

// usageError is a mistake in the command line or its input; it exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

func usageErr(format string, a ...any) error {
	for _, v := range a {
		if err, ok := v.(error); ok && errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp
		}
	}
	return usageError{fmt.Errorf(format, a...)}
}

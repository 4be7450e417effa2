package core

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/mapagg/mapagg/internal/protocol"
)

// User code on the leader. Every call of a job type's code (params, Validate, Split, plan paging,
// Merge, Check, Identity, Result, aggregate encoding) goes through isolate. A panic becomes a
// *UserCodeError naming the call, the panic value and the user's frame, and so does an error that
// must fail the job. The job fails; the term, the other jobs and the leadership go on.

// UserCodeError is a job type's code failing on the leader: it panicked, or returned an error that
// fails the job. It says which call, with what, and where in the user's code.
type UserCodeError struct {
	Type  string // the job type
	Call  string // what the leader called: "split", "merge", "result", …
	Panic any    // the panic value; nil when the call returned Err
	Frame string // the first frame of the panic outside the runtime and mapagg, e.g. "main.merge (bad.go:12)"
	Stack string // the whole stack of the panic, for the log
	Err   error  // the error returned (or the panic value, as an error)
}

func (e *UserCodeError) Error() string {
	if e.Panic == nil {
		return fmt.Sprintf("%s %s: %v", e.Type, e.Call, e.Err)
	}
	s := fmt.Sprintf("%s %s: panic: %s", e.Type, e.Call, protocol.Clip(fmt.Sprint(e.Panic), maxPanicText))
	if e.Frame != "" {
		s += " [at " + e.Frame + "]"
	}
	return s
}

// maxPanicText bounds the panic value in an error: it is stored with the job.
const maxPanicText = 1024

func (e *UserCodeError) Unwrap() error { return e.Err }

// Panicked reports whether the call panicked (rather than returned an error).
func (e *UserCodeError) Panicked() bool { return e.Panic != nil }

// isolate runs f, a call of job type typ's code named call. A panic comes back as a
// *UserCodeError; an error f returns comes back as it is.
func Isolate(typ, call string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := make([]uintptr, 64)
			n := runtime.Callers(2, stack)
			perr, ok := r.(error)
			if !ok {
				perr = fmt.Errorf("%v", r)
			}
			err = &UserCodeError{Type: typ, Call: call, Panic: r, Frame: userFrame(stack[:n]), Stack: stackText(stack[:n]), Err: perr}
		}
	}()
	return f()
}

// isolateErr is isolate for a call whose error also fails the job: it is wrapped in a
// *UserCodeError too.
func IsolateErr(typ, call string, f func() error) error {
	err := Isolate(typ, call, f)
	var ue *UserCodeError
	if err != nil && !errors.As(err, &ue) {
		err = &UserCodeError{Type: typ, Call: call, Err: err}
	}
	return err
}

// wrapOp prefixes err with op, unless it is a *UserCodeError: that names its call already.
func WrapOp(op string, err error) error {
	if _, ok := err.(*UserCodeError); ok {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// frameworkPkgs are mapagg's own packages: a frame in them is not the user's.
var frameworkPkgs = []string{"client", "coordinator", "election", "internal/api", "internal/bus", "internal/coordinator", "internal/jobstore", "internal/membership",
	"internal/observe", "internal/precise", "internal/protocol", "internal/queue", "internal/shuffle", "internal/worker",
	"jobs", "node", "store", "worker"}

const modulePath = "github.com/mapagg/mapagg/"

// userFrame returns the first frame of pcs (innermost first) outside the runtime, the standard
// library and mapagg's own packages, as "function (dir/file.go:line)"; failing that, the first
// frame outside the runtime; "" for none.
func userFrame(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	fallback := ""
	for {
		f, more := frames.Next()
		if f.Function != "" {
			switch pkg := funcPackage(f.Function); {
			case pkg == "runtime" || strings.HasPrefix(pkg, "runtime/"):
			case isFramework(pkg) || isStd(pkg):
				if fallback == "" {
					fallback = formatFrame(f)
				}
			default:
				return formatFrame(f)
			}
		}
		if !more {
			return fallback
		}
	}
}

func formatFrame(f runtime.Frame) string {
	file := filepath.Join(filepath.Base(filepath.Dir(f.File)), filepath.Base(f.File))
	return fmt.Sprintf("%s (%s:%d)", f.Function, file, f.Line)
}

// funcPackage returns the import path of a function's package, from its full name
// ("example.com/a/b.(*T[...]).M" is in "example.com/a/b").
func funcPackage(fn string) string {
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return fn
	}
	return fn[:slash+1+dot]
}

func isFramework(pkg string) bool {
	rest, ok := strings.CutPrefix(pkg, modulePath)
	if !ok {
		return false
	}
	for _, p := range frameworkPkgs {
		if rest == p || strings.HasPrefix(rest, p+"/") && p != "jobs" {
			return true
		}
	}
	return false
}

// isStd reports whether pkg is in the standard library: its first element has no dot (main
// excepted: that is the user's program).
func isStd(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return pkg != "main" && !strings.Contains(first, ".")
}

func stackText(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
		if !more || b.Len() > 16<<10 {
			return b.String()
		}
	}
}

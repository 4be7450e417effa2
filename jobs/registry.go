package jobs

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// ErrUnknownType is matched by every *UnknownTypeError.
var ErrUnknownType = errors.New("unknown job type")

// ErrDuplicateType is returned by Register for a type name that is already registered.
var ErrDuplicateType = errors.New("job type already registered")

// UnknownTypeError is returned by Lookup for a type nobody registered. It matches ErrUnknownType.
type UnknownTypeError struct {
	Type  string   // the type asked for
	Known []string // the registered types, sorted
}

func (e *UnknownTypeError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown job type %q; no job types are registered", e.Type)
	}
	return fmt.Sprintf("unknown job type %q; known: %s", e.Type, strings.Join(e.Known, ", "))
}

// Is reports whether target is ErrUnknownType.
func (e *UnknownTypeError) Is(target error) bool { return target == ErrUnknownType }

// maxTypeLen bounds a job type name.
const maxTypeLen = 64

// Registry maps job type names to jobs. It is safe for concurrent use.
type Registry struct {
	mu   sync.RWMutex
	jobs map[string]Job
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{jobs: make(map[string]Job)}
}

// Register adds j under j.Type(). It refuses a nil job, a type name that is empty, longer than 64
// bytes or holds anything but letters, digits, '-', '_' and '.', and a name already registered
// (ErrDuplicateType).
func (r *Registry) Register(j Job) error {
	if j == nil {
		return errors.New("register job: nil job")
	}
	typ := j.Type()
	if err := checkTypeName(typ); err != nil {
		return fmt.Errorf("register job: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[typ]; ok {
		return fmt.Errorf("register job %q: %w", typ, ErrDuplicateType)
	}
	r.jobs[typ] = j
	return nil
}

func checkTypeName(typ string) error {
	if typ == "" {
		return errors.New("empty job type")
	}
	if len(typ) > maxTypeLen {
		return fmt.Errorf("job type %q is longer than %d bytes", typ, maxTypeLen)
	}
	for _, c := range typ {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("job type %q: only letters, digits, '-', '_' and '.' are allowed", typ)
		}
	}
	return nil
}

// Lookup returns the job registered as typ, or an *UnknownTypeError listing the known types.
func (r *Registry) Lookup(typ string) (Job, error) {
	r.mu.RLock()
	j, ok := r.jobs[typ]
	r.mu.RUnlock()
	if !ok {
		return nil, &UnknownTypeError{Type: typ, Known: r.Types()}
	}
	return j, nil
}

// Types returns the registered type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	types := make([]string, 0, len(r.jobs))
	for t := range r.jobs {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}

// defaultRegistry is the process-wide registry, empty until a program registers its job types.
var defaultRegistry = NewRegistry()

// Default returns the process-wide registry: whatever was added with Register (the stock worker
// binary registers the built-in jobs of package builtin).
func Default() *Registry { return defaultRegistry }

// Register adds j to the default registry. Call it from main, before the node starts, to add a
// job type of your own.
func Register(j Job) error { return Default().Register(j) }

package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// A keyed job registers as a job type: listed, looked up, always keyed; its aggregate calls
// refuse; a second registration of the name is refused.
func TestRegisterKeyed(t *testing.T) {
	r := NewRegistry()
	k := Keyed("sales", sales{})
	if err := r.RegisterKeyed(k); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterKeyed(k); !errors.Is(err, ErrDuplicateType) {
		t.Fatalf("second registration: %v", err)
	}
	if err := r.RegisterKeyed(nil); err == nil {
		t.Fatal("nil keyed job registered")
	}
	j, err := r.Lookup("sales")
	if err != nil {
		t.Fatal(err)
	}
	if KeyedOf(j, json.RawMessage(`{}`)) != k || KeyedForm(j) != k {
		t.Fatal("the registered job does not give its keyed form")
	}
	if _, err := j.Map(context.Background(), nil, Task{}); err == nil {
		t.Fatal("Map of a keyed-only job did not refuse")
	}
	if _, err := j.NewAggregate(nil); err == nil {
		t.Fatal("NewAggregate of a keyed-only job did not refuse")
	}
	if err := j.Validate(json.RawMessage(`{"nope":1}`)); err == nil {
		t.Fatal("Validate does not reach the keyed job")
	}
	if KeyedOf(Typed("plain", plainSum{}), nil) != nil {
		t.Fatal("an aggregate job has a keyed form")
	}
}

type plainSum struct{}

type plainParams struct{}

func (plainSum) Split(context.Context, Env, plainParams) ([]int, error) { return []int{1}, nil }
func (plainSum) Map(_ context.Context, _ Env, s int) (int, error)       { return s, nil }
func (plainSum) Merge(a, b int) int                                     { return a + b }

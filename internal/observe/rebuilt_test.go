package observe

import (
	"strings"
	"testing"
)

// A rebuilt stream, container or queue is one of the worker's events, naming what was missing.
func TestRecorder_Rebuilt(t *testing.T) {
	r := NewRecorder("w1")
	r.Rebuilt("container", "container jobs (found missing by put a/checkpoint)", 7)
	evs := r.Own(0)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	e := evs[0]
	if e.Kind != EventRebuilt || e.State != "container" || e.Epoch != 7 || e.Worker != "w1" ||
		!strings.Contains(e.Err, "container jobs (found missing by put a/checkpoint)") {
		t.Fatalf("event %+v", e)
	}
	data, err := e.Encode()
	if err != nil {
		t.Fatalf("the event does not encode for the cluster: %v", err)
	}
	if len(data) == 0 {
		t.Fatal("empty encoding")
	}
}

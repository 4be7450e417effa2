package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/shuffle"
)

// The memory budget is split among the slots, each at least the shuffle's minimum; a budget
// below that is refused, saying why.
func TestMemoryBudget(t *testing.T) {
	w := &Worker{cfg: Config{ID: "w", Concurrency: 4, MemoryBudget: 64 << 20}.withDefaults(bus.DefaultConfig())}
	if got := w.taskBudget(); got != 16<<20 {
		t.Fatalf("task budget %d, want 16 MiB", got)
	}
	if w := (Config{ID: "w", Concurrency: 3}).withDefaults(bus.DefaultConfig()); w.MemoryBudget != DefaultMemoryBudget(3) ||
		w.MemoryBudget < 3*DefaultTaskMemory || w.MemoryBudget > max(MaxDefaultMemoryBudget, 3*DefaultTaskMemory) {
		t.Fatalf("default budget %d, want %d (%d a slot at least, %d at most)", w.MemoryBudget, DefaultMemoryBudget(3), DefaultTaskMemory, MaxDefaultMemoryBudget)
	}
	err := Config{ID: "w", Concurrency: 4, MemoryBudget: 3 * shuffle.MinMemoryBytes}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "MemoryBudget") {
		t.Fatalf("a budget below 512 KiB a slot: %v", err)
	}
}

// The keyed metrics report the worker's counters, and nothing before the worker exists.
func TestKeyedCollector(t *testing.T) {
	var w *Worker
	c := NewKeyedCollector(func() *Worker { return w })
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d metrics before the worker started", n)
	}
	w = &Worker{}
	w.keyed.spilledBytes.Add(1234)
	w.keyed.outputBytes.Add(99)
	w.keyed.runsMerged.Add(7)
	if n := testutil.CollectAndCount(c); n != len(keyedDescs) {
		t.Fatalf("%d metrics, want %d", n, len(keyedDescs))
	}
	want := "# HELP mapagg_keyed_spilled_bytes_total Bytes keyed tasks spilled to local disk beyond their memory budget.\n# TYPE mapagg_keyed_spilled_bytes_total counter\nmapagg_keyed_spilled_bytes_total 1234\n"
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "mapagg_keyed_spilled_bytes_total"); err != nil {
		t.Fatal(err)
	}
}

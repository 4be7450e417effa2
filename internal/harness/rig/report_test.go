package rig

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
)

func TestMarkdown_SectionTableAndPara(t *testing.T) {
	var b bytes.Buffer
	m := Markdown{W: &b}
	m.P("# Title")
	m.Section("Runs")
	m.Table("run", "s")
	m.P("| %s | %s |", "a", Num(1.5))
	m.Para("%d of %d failed.", 0, 1)
	want := "# Title\n\n## Runs\n\n| run | s |\n|---|---|\n| a | 1.50 |\n\n0 of 1 failed.\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestNum_DecimalsBySize(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 1234.5: "1234", 12.34: "12.3", 1.234: "1.23", 0.1234: "0.123", -2.5: "-2.50"} {
		if got := Num(x); got != want {
			t.Errorf("Num(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestEvery_CallsAtOnceAndNotAfterStop(t *testing.T) {
	var n atomic.Int64
	stop := Every(context.Background(), 1<<40, func(context.Context) { n.Add(1) })
	stop()
	stop() // a second stop is harmless
	if got := n.Load(); got != 1 {
		t.Fatalf("%d calls before stop, want 1 (the first is at once, the next a long tick away)", got)
	}
}

package rig

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWriteSVG_MarksKillsAndElections(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := &Timeline{Title: "crash <1>", Start: t0, Total: 100, Finished: 16,
		Samples:   []Sample{{T: t0.Add(time.Second), Done: 40}, {T: t0.Add(15 * time.Second), Done: 100}},
		Completed: []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second)},
		Kills:     []Mark{{AtS: 1.5, Label: "SIGKILL w2"}},
		Elections: []Mark{{AtS: 14.2, Label: "w1 e7"}}}
	var b bytes.Buffer
	if err := WriteSVG(&b, []*Timeline{tl}); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"<svg", "SIGKILL w2", "w1 e7", colKill, colElect, "crash &lt;1&gt;", "finished 16.00 s", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ span, want float64 }{{16, 2}, {30, 5}, {7, 1}, {0.9, 0.2}, {160, 20}} {
		if got := niceStep(c.span, 8); got != c.want {
			t.Errorf("niceStep(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}

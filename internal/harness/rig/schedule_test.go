package rig

import (
	"testing"
	"time"
)

func TestJudgeTicks(t *testing.T) {
	begin := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return begin.Add(time.Duration(s) * time.Second) }
	every := 2 * time.Second
	for _, tc := range []struct {
		name             string
		ticks            map[time.Time][]string
		twice, gaps, few bool
	}{
		{"all", map[time.Time][]string{at(2): {"a"}, at(4): {"b"}, at(6): {"c"}, at(8): {"d"}, at(10): {"e"}}, false, false, false},
		{"edges missing", map[time.Time][]string{at(4): {"b"}, at(6): {"c"}, at(8): {"d"}}, false, false, false},
		{"twice", map[time.Time][]string{at(2): {"a"}, at(4): {"b", "x"}, at(6): {"c"}, at(8): {"d"}, at(10): {"e"}}, true, false, false},
		{"gap", map[time.Time][]string{at(2): {"a"}, at(4): {"b"}, at(8): {"d"}, at(10): {"e"}}, false, true, false},
		{"few", map[time.Time][]string{at(4): {"b"}, at(6): {"c"}}, false, false, true},
	} {
		r := JudgeTicks(tc.ticks, every, begin, at(10).Add(time.Second))
		if r.Possible != 5 {
			t.Errorf("%s: %d possible ticks in (12:00:00, 12:00:11]; want 5", tc.name, r.Possible)
		}
		if (len(r.Twice) > 0) != tc.twice || (len(r.Gaps) > 0) != tc.gaps || (r.Few != "") != tc.few || r.OK() != !(tc.twice || tc.gaps || tc.few) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}

package rig

import (
	"strings"
	"testing"
	"time"
)

func TestClassify_Cases(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	killed := []Kill{{Worker: "w1", Exited: at(100)}}
	for _, c := range []struct {
		name    string
		results []ResultObs
		disp    map[int]int
		want    Redo
	}{
		{"clean", []ResultObs{{T: at(10), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(20), Index: 1, Attempt: 1, Worker: "w2"}}, map[int]int{0: 1, 1: 1}, Redo{Results: 2}},
		{"retried publish is one execution", []ResultObs{{T: at(10), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(11), Index: 0, Attempt: 1, Worker: "w2"}}, nil, Redo{Results: 2}},
		{"in flight on the victim, redelivered", []ResultObs{{T: at(10), Index: 0, Attempt: 2, Worker: "w2"}}, nil, Redo{Redelivered: 1, Redone: 1, Results: 1}},
		{"completed by the victim before it died, then again", []ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			Redo{Redelivered: 1, CompletedTwice: 1, Redone: 1, Results: 2}},
		{"completed by a survivor, then again", []ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			Redo{Redelivered: 1, CompletedTwice: 1, Redone: 1, CompletedRerun: 1, Results: 2}},
		{"completed by the restarted victim, then again", []ResultObs{{T: at(900), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			Redo{Redelivered: 1, CompletedTwice: 1, Redone: 1, CompletedRerun: 1, Results: 2}},
		{"re-dispatch counted", nil, map[int]int{0: 2, 1: 1, 2: 3}, Redo{Redispatched: 3}},
		{"backed up by the leader, run twice on purpose", []ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(90), Index: 0, Attempt: 1, Worker: "w3"}}, map[int]int{0: 2},
			Redo{Redispatched: 1, BackedUp: 1, Results: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var backups map[int]bool
			if strings.HasPrefix(c.name, "backed up") {
				backups = map[int]bool{0: true}
			}
			if got := Classify(c.results, c.disp, backups, killed); got != c.want {
				t.Errorf("classify = %+v, want %+v", got, c.want)
			}
		})
	}
}

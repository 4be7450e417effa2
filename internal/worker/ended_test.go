package worker

import (
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

type fakeDelivery struct {
	attempt int
	id      string
}

func (d fakeDelivery) Attempt() int  { return d.attempt }
func (d fakeDelivery) MsgID() string { return d.id }

// A small job's shard sent a moment ago skips the check of its job's end on its first delivery;
// a replay (sent long ago), a redelivery and any other shard are checked.
func TestSentJustNow(t *testing.T) {
	now := time.Now()
	fresh := func(at time.Time) string { return protocol.FreshShardMsgID("job-1", 0, "term", at) + "~k~tag" }
	for _, tc := range []struct {
		name string
		d    fakeDelivery
		want bool
	}{
		{"fresh, first delivery", fakeDelivery{1, fresh(now)}, true},
		{"fresh, clock a second behind", fakeDelivery{1, fresh(now.Add(time.Second))}, true},
		{"redelivered", fakeDelivery{2, fresh(now)}, false},
		{"replayed later", fakeDelivery{1, fresh(now.Add(-5 * time.Second))}, false},
		{"sent in the future", fakeDelivery{1, fresh(now.Add(time.Minute))}, false},
		{"a stored job's shard", fakeDelivery{1, protocol.ShardMsgID("job-1", 0)}, false},
		{"no id", fakeDelivery{1, ""}, false},
	} {
		if got := sentJustNow(tc.d); got != tc.want {
			t.Errorf("%s: sentJustNow = %v, want %v", tc.name, got, tc.want)
		}
	}
}

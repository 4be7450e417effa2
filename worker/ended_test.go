package worker

import (
	"testing"
	"time"
)

type fakeDelivery struct {
	attempt int
	at      time.Time
}

func (d fakeDelivery) Attempt() int         { return d.attempt }
func (d fakeDelivery) Published() time.Time { return d.at }

// Only a delivery that may be a replay costs a storage read: a redelivery, a message older than
// replayAge, or one whose age is unknown. A fresh first delivery (every new job's) does not.
func TestMayBeReplay(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		d    fakeDelivery
		want bool
	}{
		{"fresh first delivery", fakeDelivery{1, now.Add(-50 * time.Millisecond)}, false},
		{"redelivery", fakeDelivery{2, now.Add(-50 * time.Millisecond)}, true},
		{"old first delivery (after a NATS restart)", fakeDelivery{1, now.Add(-2 * replayAge)}, true},
		{"age unknown", fakeDelivery{1, time.Time{}}, true},
	} {
		if got := mayBeReplay(tc.d); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

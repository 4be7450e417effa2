package jobstore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// A retry is a copy of the whole spec: every field but the id, retry_of and the submission time
// is the original's, including fields added after this test was written (it walks them all).
func TestRetrySpec_CopiesEveryField(t *testing.T) {
	tick := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	old := &protocol.Spec{ID: "20261121-120000-0000beef", Type: "sleep", Params: json.RawMessage(`{"shards":1}`),
		SubmittedAt: tick, After: []string{"20261121-110000-0000cafe"}, Retries: 3, RetryOf: "20261121-100000-0000f00d",
		Schedule: "nightly", Tick: &tick, Priority: 5, OutputFormat: "jsonl.zst"}
	v := reflect.ValueOf(*old)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the fixture leaves %s zero: set it, so that the copy of it is checked", v.Type().Field(i).Name)
		}
	}
	now := tick.Add(time.Hour)
	rs := RetrySpec(old, "20261121-130000-00000001", now)
	if rs.ID != "20261121-130000-00000001" || rs.RetryOf != old.ID || !rs.SubmittedAt.Equal(now) {
		t.Fatalf("id %s, retry_of %s, submitted %v", rs.ID, rs.RetryOf, rs.SubmittedAt)
	}
	got, want := reflect.ValueOf(*rs), reflect.ValueOf(*old)
	for i := range got.NumField() {
		switch name := got.Type().Field(i).Name; name {
		case "ID", "RetryOf", "SubmittedAt":
		default:
			if !reflect.DeepEqual(got.Field(i).Interface(), want.Field(i).Interface()) {
				t.Errorf("%s: %v, want the original's %v", name, got.Field(i).Interface(), want.Field(i).Interface())
			}
		}
	}
	if _, err := rs.Encode(); err != nil {
		t.Errorf("the retry's spec: %v", err)
	}
	rs.After[0], rs.Params[0] = "x", ' '
	if old.After[0] == "x" || old.Params[0] == ' ' {
		t.Error("the retry shares the original's slices")
	}
}

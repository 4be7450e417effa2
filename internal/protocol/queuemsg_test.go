package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestQueueText_InlineSpecRoundTrips(t *testing.T) {
	spec := &Spec{ID: "job-1", Type: "sleep", Params: []byte(`{"shards":1}`), SubmittedAt: time.Unix(1, 0).UTC()}
	data, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		text   string
		inline bool
	}{
		{"id alone (every release)", "job-1", false},
		{"id with blanks", "  job-1 \n", false},
		{"inline spec", QueueText("job-1", data), true},
		{"too big to travel", QueueText("job-1", make([]byte, InlineSpecMax+1)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, got, err := ParseQueueText(tc.text)
			if err != nil || id != "job-1" || (got != nil) != tc.inline {
				t.Fatalf("ParseQueueText(%.40q) = %q, %v, %v", tc.text, id, got, err)
			}
			if tc.inline && (got.Type != "sleep" || string(got.Params) != `{"shards":1}`) {
				t.Fatalf("inline spec %+v", got)
			}
		})
	}
}

func TestParseQueueText_Refuses(t *testing.T) {
	other, _ := (&Spec{ID: "job-2", Type: "sleep", Params: []byte(`{}`)}).Encode()
	for name, text := range map[string]string{
		"bad id":            "Job 1",
		"spec of other job": "job-1\n" + string(other),
		"spec not JSON":     "job-1\n{nope",
	} {
		t.Run(name, func(t *testing.T) {
			if _, spec, err := ParseQueueText(text); err == nil || spec != nil {
				t.Fatalf("ParseQueueText(%q): spec %v, err %v; want an error and no spec", text, spec, err)
			}
		})
	}
	if _, _, err := ParseQueueText("Job 1"); !errors.Is(err, ErrBadID) {
		t.Fatalf("bad id: %v, want ErrBadID", err)
	}
}

func TestSubmitted_HintSaysInline(t *testing.T) {
	if id, inline := ParseSubmitted(SubmittedInline("job-1")); id != "job-1" || !inline {
		t.Fatalf("inline hint: %q %v", id, inline)
	}
	if id, inline := ParseSubmitted([]byte("job-1")); id != "job-1" || inline {
		t.Fatalf("plain hint: %q %v", id, inline)
	}
	if CheckID(string(SubmittedInline("job-1"))) == nil {
		t.Fatal("an earlier release would take the inline hint for an id")
	}
}

func TestShardSentAt(t *testing.T) {
	at := time.UnixMilli(1_764_000_000_123)
	id := FreshShardMsgID("job-1", 16, "t0a1b2", at)
	for _, tc := range []struct {
		id   string
		ok   bool
		want time.Time
	}{
		{id, true, at},
		{id + "~k1~0123abcd", true, at}, // tagged with the key (bus.Keyring.TagMsgID)
		{ShardMsgID("job-1", 16), false, time.Time{}},
		{BackupShardMsgID("job-1", 16, "fresh"), false, time.Time{}},
		{RepairShardMsgID("job-1", 16, 5), false, time.Time{}},
		{"job-1/16/fresh/x/t", false, time.Time{}},
		{"job-1/16/fresh/-5/t", false, time.Time{}},
	} {
		got, ok := ShardSentAt(tc.id)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("ShardSentAt(%q) = %v, %v; want %v, %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
	if !strings.HasPrefix(id, ShardMsgID("job-1", 16)+"/") {
		t.Errorf("fresh id %q does not start with the shard's id", id)
	}
}

func FuzzParseQueueText(f *testing.F) {
	spec, _ := (&Spec{ID: "job-1", Type: "sleep", Params: []byte(`{"shards":1}`)}).Encode()
	f.Add("job-1")
	f.Add(QueueText("job-1", spec))
	f.Add("job-1\n")
	f.Add("\n\n{}")
	f.Fuzz(func(t *testing.T, text string) {
		id, spec, err := ParseQueueText(text)
		if err == nil && CheckID(id) != nil {
			t.Fatalf("accepted a bad id %q", id)
		}
		if spec != nil && (err != nil || spec.ID != id) {
			t.Fatalf("spec %q for id %q (err %v)", spec.ID, id, err)
		}
	})
}

func FuzzShardSentAt(f *testing.F) {
	f.Add(FreshShardMsgID("job-1", 3, "t", time.UnixMilli(5)))
	f.Add("job-1/3")
	f.Fuzz(func(t *testing.T, id string) {
		if at, ok := ShardSentAt(id); ok && at.UnixMilli() <= 0 {
			t.Fatalf("time %v from %q", at, id)
		}
	})
}

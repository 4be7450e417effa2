package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

func TestStatusRecord_RoundTrip(t *testing.T) {
	fin := time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC)
	cp := &Checkpoint{Job: "j1", Type: "sleep", State: jobs.StateFailed, Total: 40, DoneCount: 7, WriterEpoch: 3,
		PlanEpoch: 2, Seq: 9, Duplicates: 1, Error: "shard 7: bad\ninput ✓", FinishedAt: &fin}
	spec := &Spec{ID: "j1", Type: "sleep", Priority: -3, SubmittedAt: fin.Add(-time.Minute)}
	md, err := NewStatusRecord(cp, spec).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range md[StatusMetaKey] {
		if c > 126 || c < 33 {
			t.Fatalf("metadata value has %q: not a header value", c)
		}
	}
	r, err := DecodeStatusRecord(md)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != jobs.StateFailed || r.Done != 7 || r.Total != 40 || r.Error != cp.Error || r.Priority != -3 ||
		r.Epoch != 3 || !r.SubmittedAt.Equal(spec.SubmittedAt) || r.FinishedAt == nil || !r.FinishedAt.Equal(fin) {
		t.Fatalf("decoded %+v", r)
	}
}

func TestStatusRecord_LongErrorClipped(t *testing.T) {
	cp := &Checkpoint{Job: "j1", Type: "x", State: jobs.StateFailed, Error: strings.Repeat("é", 5000)}
	r := NewStatusRecord(cp, nil)
	if len(r.Error) > MaxStatusError || !strings.HasSuffix(r.Error, "…") {
		t.Fatalf("error of %d bytes, suffix %q", len(r.Error), r.Error[len(r.Error)-4:])
	}
	md, err := r.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeStatusRecord(md); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeStatusRecord_Refusals(t *testing.T) {
	if _, err := DecodeStatusRecord(map[string]string{}); !errors.Is(err, ErrNoStatusRecord) {
		t.Fatalf("no key: %v", err)
	}
	good := NewStatusRecord(&Checkpoint{Job: "j1", Type: "x", State: jobs.StateRunning, Total: 2}, nil)
	for name, change := range map[string]func(*StatusRecord){
		"version":  func(r *StatusRecord) { r.Version = 9 },
		"id":       func(r *StatusRecord) { r.Job = "../x" },
		"counts":   func(r *StatusRecord) { r.Done = 3 },
		"state":    func(r *StatusRecord) { r.State = "Running!" },
		"priority": func(r *StatusRecord) { r.Priority = 99 },
	} {
		r := *good
		change(&r)
		md, err := r.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeStatusRecord(md); !errors.Is(err, ErrBadStatusRecord) {
			t.Errorf("%s: %v, want ErrBadStatusRecord", name, err)
		}
	}
	if _, err := DecodeStatusValue("%%%"); !errors.Is(err, ErrBadStatusRecord) {
		t.Fatalf("not base64: %v", err)
	}
}

func TestSpec_Priority(t *testing.T) {
	s := &Spec{ID: "j1", Type: "x", Params: []byte(`{}`), Priority: 11}
	if _, err := s.Encode(); !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), "priority 11") {
		t.Fatalf("priority 11: %v", err)
	}
	s.Priority = 0
	b, _ := s.Encode()
	if strings.Contains(string(b), "priority") {
		t.Fatalf("priority 0 written: %s (earlier builds refuse unknown fields)", b)
	}
	if w := PriorityWeight(2) / PriorityWeight(-1); w != 8 {
		t.Fatalf("weight ratio %v, want 8", w)
	}
}

func FuzzDecodeStatusValue(f *testing.F) {
	md, _ := NewStatusRecord(&Checkpoint{Job: "j1", Type: "x", State: jobs.StateRunning, Total: 2, DoneCount: 1}, nil).Metadata()
	f.Add(md[StatusMetaKey])
	f.Add("e30")
	f.Fuzz(func(t *testing.T, v string) {
		r, err := DecodeStatusValue(v)
		if err != nil {
			return
		}
		if r.Done > r.Total || CheckID(r.Job) != nil {
			t.Fatalf("accepted %+v", r)
		}
		md, err := r.Metadata()
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		if _, err := DecodeStatusRecord(md); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// An error that JSON escapes to six bytes a character is clipped until the record fits.
func TestStatusRecord_EscapedErrorStillEncodes(t *testing.T) {
	cp := &Checkpoint{Job: "j1", Type: "x", State: jobs.StateFailed, Error: strings.Repeat("\x01<", 1500)}
	md, err := NewStatusRecord(cp, nil).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeStatusRecord(md)
	if err != nil || r.Error == "" || !strings.HasPrefix(cp.Error, strings.TrimSuffix(r.Error, "…")) {
		t.Fatalf("%v %q", err, r.Error)
	}
}

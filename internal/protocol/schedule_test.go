package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func sched(mod func(*Schedule)) *Schedule {
	s := &Schedule{Name: "nightly", UID: "abc", Every: "2s", Type: "primes", Params: json.RawMessage(`{}`), Overlap: OverlapSkip, CatchUp: "1m"}
	if mod != nil {
		mod(s)
	}
	return s
}

func TestSchedule_Check_Errors(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Schedule)
		want string
	}{
		{"both", func(s *Schedule) { s.Cron = "* * * * *" }, "not both"},
		{"neither", func(s *Schedule) { s.Every = "" }, "give --every"},
		{"bad cron", func(s *Schedule) { s.Every, s.Cron = "", "61 * * * *" }, "--cron"},
		{"cron tz", func(s *Schedule) { s.Every, s.Cron = "", "CRON_TZ=UTC * * * * *" }, "--time-zone"},
		{"sub-second", func(s *Schedule) { s.Every = "1500ms" }, "whole number of seconds"},
		{"bad every", func(s *Schedule) { s.Every = "often" }, "--every"},
		{"overlap", func(s *Schedule) { s.Overlap = "maybe" }, "skip, queue or allow"},
		{"catch-up", func(s *Schedule) { s.CatchUp = "1s" }, "at least 10s"},
		{"zone", func(s *Schedule) { s.TimeZone = "Mars/Olympus" }, "unknown time zone"},
		{"zone path", func(s *Schedule) { s.TimeZone = "../etc/passwd" }, "unknown time zone"},
		{"name", func(s *Schedule) { s.Name = "Nightly" }, "only a-z"},
		{"no type", func(s *Schedule) { s.Type = "" }, "no job type"},
		{"params", func(s *Schedule) { s.Params = json.RawMessage(`{`) }, "params"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sched(c.mod).Check()
			if !errors.Is(err, ErrBadSchedule) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrBadSchedule with %q", err, c.want)
			}
		})
	}
}

func TestSchedule_Next(t *testing.T) {
	s := sched(nil)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 25, 10, 0, 1, 500, time.UTC)
	if got, want := s.Next(at), time.Date(2026, 11, 25, 10, 0, 2, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("every 2s after %v: %v, want %v", at, got, want)
	}
	if got, want := s.Next(time.Date(2026, 11, 25, 10, 0, 2, 0, time.UTC)), time.Date(2026, 11, 25, 10, 0, 4, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("strictly after: %v, want %v", got, want)
	}
	c := sched(func(s *Schedule) { s.Every, s.Cron, s.TimeZone = "", "30 2 * * *", "Europe/Berlin" })
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	// 02:30 in Berlin (UTC+1 in November) is 01:30 UTC.
	if got, want := c.Next(at), time.Date(2026, 11, 26, 1, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("cron: %v, want %v", got, want)
	}
}

func TestSchedule_RoundTrip(t *testing.T) {
	s := sched(func(s *Schedule) { s.CreatedAt = time.Unix(100, 0).UTC() })
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSchedule(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != s.Name || got.Every != s.Every || got.CatchUpWindow() != time.Minute {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := ParseSchedule(append(b, '{')); !errors.Is(err, ErrBadSchedule) {
		t.Fatalf("trailing data: %v", err)
	}
}

func TestTickJobID(t *testing.T) {
	tick := time.Date(2026, 11, 25, 10, 0, 2, 0, time.UTC)
	a, b := TickJobID("n", "u", tick), TickJobID("n", "u", tick.In(time.FixedZone("x", 3600)))
	if a != b || CheckID(a) != nil || !strings.HasPrefix(a, "20261125-100002-") {
		t.Fatalf("ids %q %q", a, b)
	}
	if TickJobID("n", "v", tick) == a || TickJobID("m", "u", tick) == a || TickJobID("n", "u", tick.Add(time.Second)) == a {
		t.Fatal("ids collide")
	}
}

func TestSpec_Check_AfterRetries(t *testing.T) {
	base := Spec{ID: "j1", Type: "t", Params: json.RawMessage(`{}`)}
	for _, c := range []struct {
		mod  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.After = []string{"j1"} }, "after itself"},
		{func(s *Spec) { s.After = []string{"BAD"} }, "after"},
		{func(s *Spec) { s.Retries = 11 }, "retries"},
		{func(s *Spec) { s.Schedule = "X" }, "name"},
	} {
		s := base
		c.mod(&s)
		if _, err := s.Encode(); !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	tick := time.Unix(2, 0).UTC()
	s := base
	s.After, s.Retries, s.Schedule, s.Tick, s.RetryOf = []string{"a", "b"}, 3, "n", &tick, "j0"
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSpec(b)
	if err != nil || len(got.After) != 2 || got.Retries != 3 || got.Schedule != "n" || !got.Tick.Equal(tick) || got.RetryOf != "j0" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

func FuzzParseSchedule(f *testing.F) {
	b, _ := sched(nil).Encode()
	f.Add(b)
	c, _ := sched(func(s *Schedule) { s.Every, s.Cron, s.TimeZone = "", "0 3 * * 1-5", "UTC" }).Encode()
	f.Add(c)
	f.Add([]byte(`{"name":"x","cron":"@every 1s"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSchedule(data)
		if err != nil {
			return
		}
		// A schedule that parses encodes, and its next tick is after now.
		if _, err := s.Encode(); err != nil {
			t.Fatalf("parsed but cannot encode: %v", err)
		}
		now := time.Unix(1_800_000_000, 0)
		if n := s.Next(now); !n.IsZero() && !n.After(now) {
			t.Fatalf("next %v not after %v", n, now)
		}
	})
}

func FuzzParseScheduleState(f *testing.F) {
	st := ScheduleState{Name: "n", UID: "u", LastJob: "j"}
	b, _ := st.Encode()
	f.Add(b)
	m := TickMarker{Schedule: "n", UID: "u", Job: "j", Epoch: 3}
	mb, _ := m.Encode()
	f.Add(mb)
	f.Fuzz(func(t *testing.T, data []byte) {
		if s, err := ParseScheduleState(data); err == nil {
			if _, err := s.Encode(); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = ParseTickMarker(data)
	})
}

func TestRetryJobID(t *testing.T) {
	for _, c := range []struct {
		in, want string
		attempt  int
	}{
		{"20261125-100002-abcd", "20261125-100002-abcd-r1", 1},
		{"20261125-100002-abcd-r1", "20261125-100002-abcd-r2", 2},
		{"20261125-100002-abcd-r9", "20261125-100002-abcd-r10", 10},
		{"x-r0", "x-r0-r1", 1},
		{"x-r01", "x-r01-r1", 1},
	} {
		got, n := RetryJobID(c.in)
		if got != c.want || n != c.attempt || CheckID(got) != nil {
			t.Errorf("RetryJobID(%q) = %q, %d; want %q, %d", c.in, got, n, c.want, c.attempt)
		}
	}
	long := strings.Repeat("a", 63)
	if got, _ := RetryJobID(long); CheckID(got) != nil || got == long {
		t.Errorf("long id: %q", got)
	}
}

func FuzzParseEndedBlob(f *testing.F) {
	f.Add(EndedBlob("20261125-100002-abcd", "failed", time.Unix(1_800_000_000, 0)))
	f.Add("ended/x")
	f.Fuzz(func(t *testing.T, name string) {
		id, state, at, err := ParseEndedBlob(name)
		if err != nil {
			return
		}
		if got := EndedBlob(id, state, at); got != name {
			t.Fatalf("round trip %q → %q", name, got)
		}
	})
}

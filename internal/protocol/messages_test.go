package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

func TestShardMsg_RoundTrip(t *testing.T) {
	in := ShardMsg{Kind: KindAggregate, Job: "20261121-005210-3f9a0c1d", Type: "primes", Index: 7, Epoch: 3, Shard: []byte(`{"a":1}`)}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeShardMsg(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != in.Kind || out.Job != in.Job || out.Type != in.Type || out.Index != in.Index || out.Epoch != in.Epoch || !bytes.Equal(out.Shard, in.Shard) {
		t.Fatalf("round trip: got %+v want %+v", out, in)
	}
}

func TestDecodeShardMsg_Bad(t *testing.T) {
	for _, tc := range []string{
		``, `{`, `[]`, `{"j":"","t":"x","i":0,"e":1}`, `{"j":"A/B","t":"x","i":0,"e":1}`,
		`{"j":"j1","t":"","i":0,"e":1}`, `{"j":"j1","t":"x","i":-1,"e":1}`, `{"j":"j1","t":"x","i":0,"e":0}`,
	} {
		if _, err := DecodeShardMsg([]byte(tc)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeShardMsg(%q) = %v, want ErrBadMessage", tc, err)
		}
	}
}

func TestDecodeResultMsg_Bad(t *testing.T) {
	for _, tc := range []string{
		`{"j":"j1","i":0,"e":1,"a":0}`, `{"j":"j1","i":0,"e":0,"a":1}`,
		`{"j":"j1","i":0,"e":1,"a":1,"r":"x","x":"boom"}`, `nope`,
	} {
		if _, err := DecodeResultMsg([]byte(tc)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeResultMsg(%q) = %v, want ErrBadMessage", tc, err)
		}
	}
	good := ResultMsg{Kind: KindKeyed, Job: "j1", Index: 2, Epoch: 1, Attempt: 1, Partial: []byte{0, 1, 2}}
	b, _ := good.Encode()
	got, err := DecodeResultMsg(b)
	if err != nil || !bytes.Equal(got.Partial, good.Partial) {
		t.Fatalf("good result: %v %+v", err, got)
	}
}

func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{
		NewID(time.Now()): true, "a": true, "job-1": true, "": false, "-a": false, "A": false,
		"a.b": false, "a/b": false, strings.Repeat("a", 65): false, "a b": false,
	} {
		if err := CheckID(id); (err == nil) != ok {
			t.Errorf("CheckID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestParseSpec(t *testing.T) {
	s := Spec{ID: "j-1", Type: "primes", Params: []byte(`{"from":0}`), SubmittedAt: time.Unix(1, 0).UTC()}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSpec(b)
	if err != nil || got.ID != s.ID || string(got.Params) != string(s.Params) {
		t.Fatalf("ParseSpec: %v %+v", err, got)
	}
	for _, bad := range []string{`{}`, `{"id":"j","type":"x"}`, `{"id":"j","type":"x","params":{},"extra":1}`,
		`{"id":"j","type":"x","params":{}} {}`, `{"id":"J","type":"x","params":{}}`} {
		if _, err := ParseSpec([]byte(bad)); !errors.Is(err, ErrBadSpec) {
			t.Errorf("ParseSpec(%q) = %v, want ErrBadSpec", bad, err)
		}
	}
	big := Spec{ID: "j", Type: "x", Params: []byte(`"` + strings.Repeat("a", jobs.MaxSpecBytes) + `"`)}
	if _, err := big.Encode(); !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized spec: %v", err)
	}
}

func TestPlanPage_RoundTrip(t *testing.T) {
	for _, c := range []struct {
		first  int
		shards [][]byte
	}{{0, [][]byte{{}}}, {PlanPageShards, [][]byte{[]byte("a"), []byte(strings.Repeat("b", 300)), {}}}} {
		first, got, err := DecodePlanPage(EncodePlanPage(c.first, c.shards))
		if err != nil {
			t.Fatal(err)
		}
		if first != c.first || len(got) != len(c.shards) {
			t.Fatalf("first %d len %d, want %d %d", first, len(got), c.first, len(c.shards))
		}
		for i := range got {
			if !bytes.Equal(got[i], c.shards[i]) {
				t.Fatalf("shard %d differs", i)
			}
		}
	}
	b := EncodePlanPage(0, [][]byte{[]byte("abc")})
	b[len(b)-6] ^= 1
	if _, _, err := DecodePlanPage(b); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("corrupted page: %v", err)
	}
	if _, _, err := DecodePlanPage(EncodePlanPage(0, nil)); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("empty page accepted: %v", err)
	}
	if _, _, err := DecodePlanPage(EncodePlanPage(3, [][]byte{{1}})); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("misaligned page accepted: %v", err)
	}
	// A valid page in the wrong place (a page of another job's plan, or a short page) is refused.
	first, shards, _ := DecodePlanPage(EncodePlanPage(0, [][]byte{{1}, {2}}))
	if err := CheckPlanPage(0, 2, first, shards); err != nil {
		t.Fatal(err)
	}
	if err := CheckPlanPage(1, 2+PlanPageShards, first, shards); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("page 0 accepted as page 1: %v", err)
	}
	if err := CheckPlanPage(0, 3, first, shards); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("short page accepted: %v", err)
	}
	if PlanPageCount(0) != 0 || PlanPageCount(1) != 1 || PlanPageCount(PlanPageShards) != 1 || PlanPageCount(PlanPageShards+1) != 2 {
		t.Fatal("PlanPageCount")
	}
}

func TestDecodeCheckpoint(t *testing.T) {
	c := Checkpoint{Version: CheckpointVersion, Job: "j1", Type: "primes", Kind: KindAggregate, State: jobs.StateRunning, PlanEpoch: 2, WriterEpoch: 3, Total: 10, DoneCount: 4, Dispatched: 10, Plan: PlanIndexed}
	b, _ := c.Encode()
	if got, err := DecodeCheckpoint(b); err != nil || got.Kind != KindAggregate {
		t.Fatal(got, err)
	}
	for name, mut := range map[string]func(*Checkpoint){
		"version":  func(c *Checkpoint) { c.Version = 9 },
		"no kind":  func(c *Checkpoint) { c.Kind = 0 },
		"v1 kind":  func(c *Checkpoint) { c.Version = 1 },
		"bad kind": func(c *Checkpoint) { c.Kind = 'X' },
		"done>tot": func(c *Checkpoint) { c.DoneCount = 11 },
		"epochs":   func(c *Checkpoint) { c.WriterEpoch = 1 },
		"state":    func(c *Checkpoint) { c.State = "weird" },
		"job":      func(c *Checkpoint) { c.Job = "" },
		"plan":     func(c *Checkpoint) { c.Plan = "blob" },
	} {
		bad := c
		mut(&bad)
		b, _ := bad.Encode()
		if _, err := DecodeCheckpoint(b); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%s: %v, want ErrBadCheckpoint", name, err)
		}
	}
}

func FuzzDecodeShardMsg(f *testing.F) {
	f.Add([]byte(`{"j":"j1","t":"primes","i":0,"e":1,"s":"eyJhIjoxfQ=="}`))
	f.Add([]byte(`{"j":"j1"}`))
	bin, _ := (&ShardMsg{Kind: KindKeyed, Job: "j1", Type: "primes", Index: 5, Epoch: 2, Shard: []byte("abc")}).Encode()
	f.Add(bin)
	f.Add(bin[:len(bin)-1])
	f.Add(readV1(f, "shard-keyed"))
	f.Add(readV1(f, "shard-aggregate"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeShardMsg(data)
		if err != nil {
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeShardMsg(b); err != nil {
			t.Fatalf("re-decode of a valid message failed: %v", err)
		}
	})
}

func FuzzDecodeResultMsg(f *testing.F) {
	f.Add([]byte(`{"j":"j1","i":3,"e":1,"a":1,"p":"AAE="}`))
	f.Add([]byte(`{"j":"j1","i":3,"e":1,"a":2,"x":"boom"}`))
	f.Add(readV1(f, "result-keyed"))
	for _, m := range binaryResults() {
		b, _ := m.Encode()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeResultMsg(data)
		if err != nil {
			return
		}
		if m.Kind == 0 {
			m.Kind = KindKeyed // an earlier release's result: it says no kind
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResultMsg(b); err != nil {
			t.Fatalf("re-decode of a valid message failed: %v", err)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(`{"id":"j1","type":"primes","params":{"from":0,"to":10,"shards":2},"submitted_at":"2026-11-21T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			return
		}
		if _, err := s.Encode(); err != nil {
			t.Fatalf("a parsed spec does not encode: %v", err)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	c := Checkpoint{Version: CheckpointVersion, Job: "j1", Type: "primes", State: jobs.StateRunning, PlanEpoch: 1, WriterEpoch: 1, Total: 2}
	b, _ := c.Encode()
	f.Add(b)
	c.Kind, c.Plan = KindKeyed, PlanPages
	b, _ = c.Encode()
	f.Add(b)
	f.Add([]byte(legacyCheckpoint))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(data)
		if err != nil {
			return
		}
		if c.DoneCount > c.Total || c.Dispatched > c.Total {
			t.Fatalf("accepted inconsistent counts: %+v", c)
		}
	})
}

func FuzzDecodePlanPage(f *testing.F) {
	f.Add(EncodePlanPage(0, [][]byte{[]byte("a"), []byte("bc")}))
	f.Add(EncodePlanPage(PlanPageShards, [][]byte{{}}))
	f.Add([]byte("MAPAGG-PAGE\x01\x00\x05"))
	f.Fuzz(func(t *testing.T, data []byte) {
		first, shards, err := DecodePlanPage(data)
		if err != nil {
			return
		}
		if len(shards) == 0 || len(shards) > PlanPageShards || first%PlanPageShards != 0 {
			t.Fatalf("accepted a page out of bounds: first %d, %d shards", first, len(shards))
		}
		if !bytes.Equal(EncodePlanPage(first, shards), data) {
			t.Fatalf("page does not re-encode to the same bytes")
		}
	})
}

func TestTypeToken(t *testing.T) {
	seen := map[string]string{}
	for _, typ := range []string{"primes", "word-count", "a.b", "a_2eb", "a_b", "a__b", "ümlaut", "x.y.z", "A"} {
		tok := TypeToken(typ)
		for _, c := range []byte(tok) {
			if !tokenByte(c) && c != '_' {
				t.Fatalf("TypeToken(%q) = %q: byte %q is not allowed in a subject token or consumer name", typ, tok, c)
			}
		}
		if other, dup := seen[tok]; dup {
			t.Fatalf("types %q and %q share the token %q", typ, other, tok)
		}
		seen[tok] = typ
	}
	if got := NewNames("p").ShardTypeSubject("a.b", "j"); got != "p.shards.a_2eb.j" {
		t.Fatalf("ShardTypeSubject = %q", got)
	}
}

func binaryResults() []ResultMsg {
	return []ResultMsg{
		{Kind: KindAggregate, Job: "j1", Index: 3, Epoch: 1, Attempt: 1, Worker: "w", Partial: []byte{0, 1}, Micros: 12},
		{Kind: KindAggregate, Job: "j1", Index: 3, Epoch: 9, Attempt: 2, Ref: "j1/partials/3-2"},
		{Kind: KindAggregate, Job: "j1", Index: 0, Epoch: 1, Attempt: 4, Error: "boom"},
		{Kind: KindAggregate, Job: "j1", Index: 999_999, Epoch: 1 << 40, Attempt: 1},
	}
}

func TestResultMsg_BinaryRoundTrip(t *testing.T) {
	for _, in := range binaryResults() {
		b, err := in.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 'M' || b[1] != 'R' {
			t.Fatalf("not the binary form: %q", b)
		}
		out, err := DecodeResultMsg(b)
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		if out.Kind != in.Kind || out.Job != in.Job || out.Index != in.Index || out.Epoch != in.Epoch || out.Attempt != in.Attempt || out.Worker != in.Worker ||
			!bytes.Equal(out.Partial, in.Partial) || out.Ref != in.Ref || out.Error != in.Error || out.Micros != in.Micros {
			t.Fatalf("round trip: got %+v want %+v", out, in)
		}
		for cut := 0; cut < len(b); cut++ {
			if _, err := DecodeResultMsg(b[:cut]); !errors.Is(err, ErrBadMessage) {
				t.Fatalf("truncated at %d of %d: %v", cut, len(b), err)
			}
		}
		if _, err := DecodeResultMsg(append(b, 0)); !errors.Is(err, ErrBadMessage) {
			t.Fatalf("trailing byte accepted: %v", err)
		}
	}
}

func BenchmarkShardMsg_EncodeDecode(b *testing.B) {
	m := ShardMsg{Kind: KindAggregate, Job: "20261121-005210-3f9a0c1d", Type: "sleep", Index: 123456, Epoch: 7, Shard: []byte(`{"d":"1ms","i":123456}`)}
	b.ReportAllocs()
	for b.Loop() {
		data, _ := m.Encode()
		if _, err := DecodeShardMsg(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResultMsg_EncodeDecode(b *testing.B) {
	m := ResultMsg{Kind: KindAggregate, Job: "20261121-005210-3f9a0c1d", Index: 123456, Epoch: 7, Attempt: 1, Worker: "host-1234", Partial: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Micros: 1000}
	b.ReportAllocs()
	for b.Loop() {
		data, _ := m.Encode()
		if _, err := DecodeResultMsg(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestResults_BatchRoundTrip(t *testing.T) {
	var rs []*ResultMsg
	for _, m := range binaryResults() {
		m := m
		rs = append(rs, &m)
	}
	b, err := EncodeResults(rs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResults(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rs) {
		t.Fatalf("%d results, want %d", len(got), len(rs))
	}
	for i := range rs {
		in, out := rs[i], got[i]
		if out.Kind != in.Kind || out.Job != in.Job || out.Index != in.Index || out.Epoch != in.Epoch || out.Attempt != in.Attempt || out.Worker != in.Worker ||
			!bytes.Equal(out.Partial, in.Partial) || out.Ref != in.Ref || out.Error != in.Error || out.Micros != in.Micros {
			t.Fatalf("entry %d: got %+v want %+v", i, out, in)
		}
	}
	for cut := 0; cut < len(b); cut++ {
		if _, err := DecodeResults(b[:cut]); !errors.Is(err, ErrBadMessage) {
			t.Fatalf("truncated at %d of %d: %v", cut, len(b), err)
		}
	}
	one, _ := EncodeResults(rs[:1])
	if got, err := DecodeResults(one); err != nil || len(got) != 1 || one[1] != 'R' {
		t.Fatalf("a batch of one is a plain result: %q %v", one, err)
	}
	other := *rs[1]
	other.Job = "j2"
	if _, err := EncodeResults([]*ResultMsg{rs[0], &other}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("a batch mixing jobs encoded: %v", err)
	}
	if _, err := EncodeResults(nil); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("an empty batch encoded: %v", err)
	}
}

func FuzzDecodeResults(f *testing.F) {
	var rs []*ResultMsg
	for _, m := range binaryResults() {
		m := m
		rs = append(rs, &m)
	}
	b, _ := EncodeResults(rs)
	f.Add(b)
	b, _ = EncodeResults(rs[:2])
	f.Add(b)
	f.Add(readV1(f, "results-aggregate"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := DecodeResults(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Kind == 0 {
				m.Kind = KindAggregate // an earlier release's results: they say no kind
			}
		}
		b, err := EncodeResults(ms)
		if err != nil {
			t.Fatalf("re-encode of a valid batch failed: %v", err)
		}
		again, err := DecodeResults(b)
		if err != nil || len(again) != len(ms) {
			t.Fatalf("re-decode of a valid batch: %d results, %v", len(again), err)
		}
	})
}

func TestShards_BatchRoundTrip(t *testing.T) {
	shards := [][]byte{[]byte("a"), {}, []byte("ccc")}
	b, err := EncodeShards(KindAggregate, "j1", "primes", 4, 10, shards)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeShards(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d shards", len(got))
	}
	for i, m := range got {
		if m.Kind != KindAggregate || m.Job != "j1" || m.Type != "primes" || m.Epoch != 4 || m.Index != 10+i || !bytes.Equal(m.Shard, shards[i]) {
			t.Fatalf("shard %d: %+v", i, m)
		}
	}
	for cut := 0; cut < len(b); cut++ {
		if _, err := DecodeShards(b[:cut]); !errors.Is(err, ErrBadMessage) {
			t.Fatalf("truncated at %d of %d: %v", cut, len(b), err)
		}
	}
	if _, err := DecodeShards(append(b, 0)); !errors.Is(err, ErrBadMessage) {
		t.Fatal("trailing byte accepted")
	}
	one, _ := EncodeShards(KindAggregate, "j1", "primes", 4, 7, shards[:1])
	if got, err := DecodeShards(one); err != nil || len(got) != 1 || got[0].Index != 7 || one[1] != 'S' {
		t.Fatalf("a batch of one is a plain shard: %v %+v", err, got)
	}
	if _, err := EncodeShards(KindAggregate, "j1", "primes", 4, 0, nil); !errors.Is(err, ErrBadMessage) {
		t.Fatal("an empty batch encoded")
	}
	if _, err := EncodeShards(KindAggregate, "j1", "", 4, 0, shards); err != nil {
		t.Fatal(err) // encoding does not check; decoding does:
	}
	bad, _ := EncodeShards(KindAggregate, "j1", "", 4, 0, shards)
	if _, err := DecodeShards(bad); !errors.Is(err, ErrBadMessage) {
		t.Fatal("a batch without a type decoded")
	}
}

func FuzzDecodeShards(f *testing.F) {
	b, _ := EncodeShards(KindAggregate, "j1", "primes", 4, 10, [][]byte{[]byte("a"), []byte("bb")})
	f.Add(b)
	one, _ := EncodeShards(KindAggregate, "j1", "primes", 4, 10, [][]byte{[]byte("a")})
	f.Add(one)
	f.Add(readV1(f, "shards-keyed"))
	f.Add(readV1(f, "shards-aggregate"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := DecodeShards(data)
		if err != nil {
			return
		}
		shards := make([][]byte, len(ms))
		for i, m := range ms {
			shards[i] = m.Shard
		}
		b, err := EncodeShards(ms[0].Kind, ms[0].Job, ms[0].Type, ms[0].Epoch, ms[0].Index, shards)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeShards(b)
		if err != nil || len(again) != len(ms) {
			t.Fatalf("re-decode: %d shards, %v", len(again), err)
		}
	})
}

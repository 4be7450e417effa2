package protocol

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// readV1 returns a message or task as the release before job kinds wrote it (testdata/v1,
// captured from that release's encoders).
func readV1(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "v1", name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// legacyCheckpoint is a version 1 checkpoint of a keyed job: no kind.
const legacyCheckpoint = `{"version":1,"job":"20261128-163245-e13cefa2","type":"wordcount","state":"running","plan_epoch":1,` +
	`"writer_epoch":1,"total":36,"done_count":0,"dispatched":33,"shards_per_msg":1,"plan":"pages","aggregate":"e30=","seq":5}`

// Shards of the previous format say no kind: a keyed task is known by its magic, and decodes.
func TestDecodeShards_LegacyKindFromThePayload(t *testing.T) {
	for name, want := range map[string]Kind{"shard-keyed": KindKeyed, "shards-keyed": KindKeyed, "shard-aggregate": KindAggregate, "shards-aggregate": KindAggregate} {
		ms, err := DecodeShards(readV1(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, m := range ms {
			if m.Kind != want {
				t.Fatalf("%s: kind %s, want %s", name, m.Kind, want)
			}
			if m.Kind == KindKeyed {
				if _, err := DecodeKeyedTask(m.Shard); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	m, err := DecodeShardMsg(readV1(t, "shard-keyed"))
	if err != nil || m.Kind != KindKeyed || m.Index != 4 {
		t.Fatalf("single legacy shard: %+v %v", m, err)
	}
}

// A keyed shard is written with its kind in the header and without the magic; an aggregate
// job's shard that starts with the magic stays an aggregate job's.
func TestEncodeShards_KindInTheHeader(t *testing.T) {
	task := EncodeKeyedTask(KeyedTask{Task: TaskMap, Partitions: 2, Shard: []byte("s")})
	for _, shards := range [][][]byte{{task}, {task, task}} {
		b, err := EncodeShards(KindKeyed, "j1", "wordcount", 1, 0, shards)
		if err != nil {
			t.Fatal(err)
		}
		if b[2] != wireVersion || Kind(b[3]) != KindKeyed || bytes.Contains(b, legacyKeyedMagic) {
			t.Fatalf("header %q", b[:4])
		}
		ms, err := DecodeShards(b)
		if err != nil || ms[0].Kind != KindKeyed {
			t.Fatalf("%+v %v", ms, err)
		}
	}
	magic := append(append([]byte{}, legacyKeyedMagic...), 'M', 1)
	b, _ := EncodeShards(KindAggregate, "j1", "primes", 1, 0, [][]byte{magic})
	if ms, err := DecodeShards(b); err != nil || ms[0].Kind != KindAggregate {
		t.Fatalf("an aggregate shard with the magic: %+v %v", ms, err)
	}
	if _, err := EncodeShards(0, "j1", "primes", 1, 0, [][]byte{magic, magic}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("shards without a kind encoded: %v", err)
	}
	if _, err := (&ShardMsg{Job: "j1", Type: "primes", Epoch: 1}).Encode(); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("a shard without a kind encoded: %v", err)
	}
	bad := append([]byte{}, b...)
	bad[3] = 'X'
	if _, err := DecodeShards(bad); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("an unknown kind decoded: %v", err)
	}
}

// Results of the previous format decode with no kind; new ones carry theirs, one per batch.
func TestDecodeResults_LegacyAndKind(t *testing.T) {
	rs, err := DecodeResults(readV1(t, "results-aggregate"))
	if err != nil || len(rs) != 3 || rs[0].Kind != 0 || rs[1].Ref == "" || rs[2].Error == "" {
		t.Fatalf("legacy batch: %+v %v", rs, err)
	}
	r, err := DecodeResultMsg(readV1(t, "result-keyed"))
	if err != nil || r.Kind != 0 || r.Index != 4 {
		t.Fatalf("legacy result: %+v %v", r, err)
	}
	r.Kind = KindKeyed
	b, err := EncodeResults([]*ResultMsg{r, {Kind: KindKeyed, Job: r.Job, Index: 5, Epoch: 1, Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if b[2] != wireVersion || Kind(b[3]) != KindKeyed {
		t.Fatalf("header %q", b[:4])
	}
	if got, err := DecodeResults(b); err != nil || got[0].Kind != KindKeyed || got[1].Kind != KindKeyed {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := EncodeResults([]*ResultMsg{r, {Kind: KindAggregate, Job: r.Job, Index: 5, Epoch: 1, Attempt: 1}}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("a batch mixing kinds encoded: %v", err)
	}
	r.Kind = 0
	if _, err := r.Encode(); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("a result without a kind encoded: %v", err)
	}
}

// Keyed tasks of the previous format (stored plans, messages in flight) decode as new ones do.
func TestDecodeKeyedTask_Legacy(t *testing.T) {
	m, err := DecodeKeyedTask(readV1(t, "keyed-map-task"))
	if err != nil || m.Task != TaskMap || m.Partitions != 3 || !bytes.HasPrefix(m.Shard, []byte(`{"blob"`)) {
		t.Fatalf("%+v %v", m, err)
	}
	r, err := DecodeKeyedTask(readV1(t, "keyed-reduce-task"))
	if err != nil || r.Task != TaskReduce || r.Partition != 2 || r.MapShards != 33 {
		t.Fatalf("%+v %v", r, err)
	}
	if !bytes.Equal(EncodeKeyedTask(r), readV1(t, "keyed-reduce-task")[len(legacyKeyedMagic):]) {
		t.Fatal("the new form is not the old one without the magic")
	}
}

// A version 1 checkpoint (no kind) is read; a version 2 one of a planned job needs its kind.
func TestDecodeCheckpoint_Legacy(t *testing.T) {
	c, err := DecodeCheckpoint([]byte(legacyCheckpoint))
	if err != nil || c.Kind != 0 || c.Version != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	c.Version, c.Kind = CheckpointVersion, KindKeyed
	b, _ := c.Encode()
	if !bytes.Contains(b, []byte(`"kind":"keyed"`)) {
		t.Fatalf("%s", b)
	}
	if got, err := DecodeCheckpoint(b); err != nil || got.Kind != KindKeyed {
		t.Fatalf("%+v %v", got, err)
	}
	c.Kind, c.Plan = 0, ""
	b, _ = c.Encode()
	if _, err := DecodeCheckpoint(b); err != nil {
		t.Fatalf("a job refused before it was planned has no kind: %v", err)
	}
	if _, err := DecodeCheckpoint(bytes.Replace(b, []byte(`"version":2`), []byte(`"version":2,"kind":"mapreduce"`), 1)); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("an unknown kind decoded: %v", err)
	}
}

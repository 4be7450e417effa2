package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestKeyedTask_RoundTrip(t *testing.T) {
	for _, kt := range []KeyedTask{
		{Task: TaskMap, Partitions: 8, Shard: []byte(`{"b":"x"}`)},
		{Task: TaskMap, Partitions: 1},
		{Task: TaskReduce, Partitions: 8, Partition: 7, Count: 1, MapShards: 24},
		{Task: TaskReduce, Partitions: 8, Partition: 4, Count: 4, MapShards: 24},
		{Task: TaskReduce, Partitions: 8, Partition: 7, Count: 1, MapShards: 24, Output: "tsv", KeyText: true},
		{Task: TaskReduce, Partitions: 8, Partition: 4, Count: 4, MapShards: 24, Output: "tsv.zst", KeyText: true, ValueText: true},
		{Task: TaskReduce, Partitions: 8, Partition: 0, Count: 1, MapShards: 2, Output: "jsonl.zst"},
		{Task: TaskReduce, Partitions: 8, Partition: 0, Count: 1, MapShards: 2, Output: "tsv"},
	} {
		b := EncodeKeyedTask(kt)
		if bytes.HasPrefix(b, legacyKeyedMagic) {
			t.Fatalf("%+v: written with the legacy magic", kt)
		}
		got, err := DecodeKeyedTask(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Task != kt.Task || got.Partitions != kt.Partitions || got.Partition != kt.Partition || got.MapShards != kt.MapShards || got.Count != kt.Count || !bytes.Equal(got.Shard, kt.Shard) ||
			got.Output != kt.Output || got.KeyText != kt.KeyText || got.ValueText != kt.ValueText {
			t.Fatalf("%+v became %+v", kt, got)
		}
	}
	for _, bad := range [][]byte{nil, []byte("{}"), {'X', 1}, {'R', 2, 2, 0}, {'M', 0}, {'R', 2, 1, 3, 9, 9},
		{'R', 8, 4, 3, 1}, {'R', 8, 4, 3, 0}, {'R', 8, 4, 3, 5},
		{'R', 8, 4, 3, 1, 0}, {'R', 8, 4, 3, 1, 0x20}, {'R', 8, 4, 3, 1, outJSONL}, {'R', 8, 4, 3, 1, outTSV | outJSONL | outZstd},
		{'R', 8, 4, 3, 1, outZstd | outKeyText}, {'R', 8, 4, 3, 0, outTSV}, {'R', 8, 4, 3, 1, outTSV, 0},
		{0xFF, 'K'}, {0xFF, 'K', 'X', 1}, {0xFF, 'K', 'R', 2, 2, 0}, {0xFF, 'K', 'M', 0}, {0xFF, 'K', 'R', 2, 1, 3, 9}, {0xFF, 'K', 0xFF, 'K', 'M', 1}} {
		if _, err := DecodeKeyedTask(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// Commits name only their own task's blobs, with sane offsets.
func TestKeyedCommits_Checked(t *testing.T) {
	id := "20260101-000000-abcdef01"
	ok, _ := json.Marshal(MapCommit{Blob: MapRunBlob(id, 3, 77), Offsets: []int64{0, 33, 70}, Records: 2})
	if _, err := DecodeMapCommit(id, 3, 2, ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []MapCommit{
		{Blob: MapRunBlob(id, 4, 77), Offsets: []int64{0, 33, 70}},
		{Blob: MapRunBlob("20260101-000000-abcdef02", 3, 77), Offsets: []int64{0, 33, 70}},
		{Blob: id + "/map/3.x", Offsets: []int64{0, 33, 70}},
		{Blob: MapRunBlob(id, 3, 77), Offsets: []int64{0, 70, 33}},
		{Blob: MapRunBlob(id, 3, 77), Offsets: []int64{1, 33, 70}},
		{Blob: MapRunBlob(id, 3, 77), Offsets: []int64{0, 70}},
	} {
		b, _ := json.Marshal(c)
		if _, err := DecodeMapCommit(id, 3, 2, b); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	rc, _ := json.Marshal(ReduceCommit{Partition: 1, Blob: OutputBlob(id, 1, 5), Records: 3, Bytes: 40})
	if _, err := DecodeReduceCommit(id, 1, rc); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeReduceCommit(id, 2, rc); err == nil {
		t.Error("a reduce commit of partition 1 accepted for partition 2")
	}
	group, _ := json.Marshal(ReduceGroupCommit{Outputs: []OutputPartition{
		{Partition: 4, Blob: OutputBlob(id, 4, 5), Records: 1, Bytes: 10}, {Partition: 5, Blob: OutputBlob(id, 5, 5)}}})
	if cs, err := DecodeReduceCommits(id, 4, 2, group); err != nil || len(cs) != 2 || cs[1].Partition != 5 {
		t.Fatalf("a group commit: %+v %v", cs, err)
	}
	if cs, err := DecodeReduceCommits(id, 1, 1, rc); err != nil || len(cs) != 1 {
		t.Fatalf("a one-partition commit: %+v %v", cs, err)
	}
	for _, bad := range []struct {
		first, n int
		data     []byte
	}{{5, 2, group}, {4, 3, group}, {4, 2, rc}, {1, 2, rc}} {
		if _, err := DecodeReduceCommits(id, bad.first, bad.n, bad.data); err == nil {
			t.Errorf("partitions %d+%d accepted %s", bad.first, bad.n, bad.data)
		}
	}
	if p, a, err := ParseOutputBlob(id, OutputBlob(id, 12, 345)); err != nil || p != 12 || a != 345 {
		t.Errorf("ParseOutputBlob: %d %d %v", p, a, err)
	}
	if _, ok, err := DecodeRunLost(id, 1, rc); ok || err != nil {
		t.Errorf("a reduce commit read as a lost run: %v", err)
	}
	for _, blob := range []string{MapRunBlob(id, 3, 77), MapManifestBlob(id)} {
		b, _ := json.Marshal(RunLost{Partition: 1, Lost: blob})
		if l, ok, err := DecodeRunLost(id, 1, b); !ok || err != nil || l.Lost != blob {
			t.Errorf("lost %s: %+v %v %v", blob, l, ok, err)
		}
	}
	for _, c := range []RunLost{{Partition: 1, Lost: OutputBlob(id, 1, 5)}, {Partition: 2, Lost: MapRunBlob(id, 3, 77)}, {Partition: 1, Lost: "other/map-manifest"}} {
		b, _ := json.Marshal(c)
		if _, ok, err := DecodeRunLost(id, 1, b); !ok || err == nil {
			t.Errorf("%+v accepted (%v)", c, ok)
		}
	}
}

func FuzzDecodeKeyedTask(f *testing.F) {
	f.Add(EncodeKeyedTask(KeyedTask{Task: TaskMap, Partitions: 8, Shard: []byte("x")}))
	f.Add(EncodeKeyedTask(KeyedTask{Task: TaskReduce, Partitions: 8, Partition: 3, MapShards: 10}))
	f.Add(EncodeKeyedTask(KeyedTask{Task: TaskReduce, Partitions: 8, Partition: 3, Count: 5, MapShards: 10}))
	for _, name := range []string{"keyed-map-task", "keyed-reduce-task"} {
		f.Add(readV1(f, name))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kt, err := DecodeKeyedTask(data)
		if err != nil {
			return
		}
		again, err := DecodeKeyedTask(EncodeKeyedTask(kt))
		if err != nil || again.Task != kt.Task || again.Partitions != kt.Partitions || again.Partition != kt.Partition ||
			again.MapShards != kt.MapShards || again.Count != kt.Count || !bytes.Equal(again.Shard, kt.Shard) {
			t.Fatalf("%+v does not round-trip: %+v %v", kt, again, err)
		}
	})
}

func FuzzDecodeKeyedCommits(f *testing.F) {
	id := "20260101-000000-abcdef01"
	mc, _ := json.Marshal(MapCommit{Blob: MapRunBlob(id, 0, 1), Offsets: []int64{0, 5, 9}})
	man, _ := json.Marshal(MapManifest{Job: id, Partitions: 2, Maps: []MapCommit{{Blob: MapRunBlob(id, 0, 1), Offsets: []int64{0, 5, 9}}}})
	lost, _ := json.Marshal(RunLost{Partition: 0, Lost: MapRunBlob(id, 3, 7)})
	f.Add(mc)
	f.Add(man)
	f.Add(lost)
	group, _ := json.Marshal(ReduceGroupCommit{Outputs: []OutputPartition{{Partition: 2, Blob: OutputBlob(id, 2, 1)}, {Partition: 3, Blob: OutputBlob(id, 3, 1)}, {Partition: 4, Blob: OutputBlob(id, 4, 1)}}})
	f.Add(group)
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := DecodeMapCommit(id, 0, 2, data); err == nil {
			if !strings.HasPrefix(c.Blob, MapPrefix(id)) || len(c.Offsets) != 3 {
				t.Fatalf("accepted %+v", c)
			}
		}
		if m, err := DecodeMapManifest(id, 1, 2, data); err == nil && len(m.Maps) != 1 {
			t.Fatalf("accepted %+v", m)
		}
		if c, err := DecodeReduceCommit(id, 0, data); err == nil && !strings.HasPrefix(c.Blob, OutputPrefix(id)) {
			t.Fatalf("accepted %+v", c)
		}
		if cs, err := DecodeReduceCommits(id, 2, 3, data); err == nil {
			for i, c := range cs {
				if c.Partition != 2+i || !strings.HasPrefix(c.Blob, OutputPrefix(id)) {
					t.Fatalf("accepted %+v", c)
				}
			}
		}
		if l, ok, err := DecodeRunLost(id, 0, data); err == nil && ok && l.Lost != MapManifestBlob(id) && !strings.HasPrefix(l.Lost, MapPrefix(id)) {
			t.Fatalf("accepted %+v", l)
		}
	})
}

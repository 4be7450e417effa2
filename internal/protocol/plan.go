package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/mapagg/mapagg/jobs"
)

// Plan forms, recorded in Checkpoint.Plan.
const (
	// PlanIndexed: the job type makes shard i from the parameters (jobs.Indexed); nothing but the
	// shard count is stored.
	PlanIndexed = "indexed"
	// PlanPages: Split's shards are stored in pages of PlanPageShards consecutive shards, page p
	// holding shards [p·PlanPageShards, min((p+1)·PlanPageShards, total)).
	PlanPages = "pages"
)

// PlanPageShards is how many shards one plan page holds: a leader reading a plan holds at most
// one page (≤ PlanPageShards × MaxShardBytes = 2 MiB) per reader, whatever the job's size.
const PlanPageShards = 512

// PlanPageCount returns how many pages a plan of total shards has.
func PlanPageCount(total int) int { return (total + PlanPageShards - 1) / PlanPageShards }

var pageMagic = []byte("MAPAGG-PAGE\x01")

// EncodePlanPage serializes one page of a stored plan: the index of its first shard, its shards
// and a CRC-32 of all of it, so a page that is truncated, corrupt or of another position is
// refused.
func EncodePlanPage(first int, shards [][]byte) []byte {
	n := len(pageMagic) + 2*binary.MaxVarintLen64 + 4
	for _, s := range shards {
		n += binary.MaxVarintLen64 + len(s)
	}
	b := make([]byte, 0, n)
	b = append(b, pageMagic...)
	b = binary.AppendUvarint(b, uint64(first))
	b = binary.AppendUvarint(b, uint64(len(shards)))
	for _, s := range shards {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// DecodePlanPage parses EncodePlanPage's output, verifying its checksum and bounds. It returns the
// page's first shard index and its shards (which alias data). The caller checks that they are the
// ones it asked for (CheckPlanPage).
func DecodePlanPage(data []byte) (first int, shards [][]byte, err error) {
	if len(data) < len(pageMagic)+6 || !bytes.HasPrefix(data, pageMagic) {
		return 0, nil, fmt.Errorf("%w: plan page: not a plan page", ErrBadCheckpoint)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return 0, nil, fmt.Errorf("%w: plan page: checksum mismatch", ErrBadCheckpoint)
	}
	r := body[len(pageMagic):]
	f, k := binary.Uvarint(r)
	if k <= 0 || f >= jobs.MaxShards || f%PlanPageShards != 0 {
		return 0, nil, fmt.Errorf("%w: plan page: first shard index", ErrBadCheckpoint)
	}
	r = r[k:]
	count, k := binary.Uvarint(r)
	if k <= 0 || count == 0 || count > PlanPageShards || f+count > jobs.MaxShards {
		return 0, nil, fmt.Errorf("%w: plan page: shard count", ErrBadCheckpoint)
	}
	r = r[k:]
	shards = make([][]byte, 0, count)
	for i := uint64(0); i < count; i++ {
		l, k := binary.Uvarint(r)
		if k <= 0 || l > jobs.MaxShardBytes || l > uint64(len(r)-k) {
			return 0, nil, fmt.Errorf("%w: plan page: shard %d length", ErrBadCheckpoint, f+i)
		}
		r = r[k:]
		shards = append(shards, r[:l:l])
		r = r[l:]
	}
	if len(r) != 0 {
		return 0, nil, fmt.Errorf("%w: plan page: %d trailing bytes", ErrBadCheckpoint, len(r))
	}
	return int(f), shards, nil
}

// CheckPlanPage verifies that a decoded page is page p of a plan of total shards.
func CheckPlanPage(p, total, first int, shards [][]byte) error {
	wantFirst := p * PlanPageShards
	want := min(PlanPageShards, total-wantFirst)
	if first != wantFirst || len(shards) != want {
		return fmt.Errorf("%w: plan page %d holds shards [%d, %d), the plan needs [%d, %d)",
			ErrBadCheckpoint, p, first, first+len(shards), wantFirst, wantFirst+want)
	}
	return nil
}

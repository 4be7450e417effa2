package shuffle

import (
	"bytes"
	"cmp"
	"slices"
)

// sortEntries sorts es by partition, then key, in place: an American flag sort (a radix sort
// that permutes in place, so it needs no second array) on the partition, then on the 8 bytes of
// the key's prefix, one byte a pass, most significant first. A comparison sort finishes a group
// of fewer than radixCutoff entries, and sorts keys of more than 8 bytes that share a prefix by
// the rest. Comparing keys in the arena (bytes.Compare) was most of a spill's time; a radix pass
// reads only the entries.
func sortEntries(es []entry, arena []byte, partitions int) {
	if partitions == 1 {
		sortPrefixes(es, arena, 0)
		return
	}
	if len(es) < radixCutoff {
		slices.SortFunc(es, func(x, y entry) int {
			if c := cmp.Compare(x.part, y.part); c != 0 {
				return c
			}
			return compareKeys(x, y, arena)
		})
		return
	}
	counts := make([]int, partitions+1)
	for i := range es {
		counts[es[i].part+1]++
	}
	for p := 1; p <= partitions; p++ {
		counts[p] += counts[p-1]
	}
	// counts[p] is where partition p starts; next[p] is its next unplaced slot.
	next := slices.Clone(counts[:partitions])
	for p := range partitions {
		end := counts[p+1]
		for next[p] < end {
			e := es[next[p]]
			for int(e.part) != p {
				q := e.part
				e, es[next[q]] = es[next[q]], e
				next[q]++
			}
			es[next[p]] = e
			next[p]++
		}
	}
	for p := range partitions {
		sortPrefixes(es[counts[p]:counts[p+1]], arena, 0)
	}
}

// radixCutoff is the group size below which a comparison sort is faster than a radix pass.
const radixCutoff = 64

// sortPrefixes sorts es (one partition) by key, its prefixes equal in the first depth bytes.
func sortPrefixes(es []entry, arena []byte, depth int) { sortPrefixesAt(es, arena, depth, 0) }

// sortPrefixesAt is sortPrefixes for entries shifted level times by sortRest.
func sortPrefixesAt(es []entry, arena []byte, depth, level int) {
	for len(es) >= radixCutoff && depth < 8 {
		shift := 56 - 8*uint(depth)
		var count [256]int
		for i := range es {
			count[byte(es[i].prefix>>shift)]++
		}
		if count[byte(es[0].prefix>>shift)] == len(es) {
			depth++ // one bucket: the next byte
			continue
		}
		var start, next [257]int
		for d := range 256 {
			start[d+1] = start[d] + count[d]
			next[d] = start[d]
		}
		for d := range 256 {
			end := start[d+1]
			for next[d] < end {
				e := es[next[d]]
				for b := byte(e.prefix >> shift); int(b) != d; b = byte(e.prefix >> shift) {
					e, es[next[b]] = es[next[b]], e
					next[b]++
				}
				es[next[d]] = e
				next[d]++
			}
		}
		for d := range 256 {
			if start[d+1]-start[d] > 1 {
				sortPrefixesAt(es[start[d]:start[d+1]], arena, depth+1, level)
			}
		}
		return
	}
	if len(es) > 1 {
		slices.SortFunc(es, comparePrefixes)
		sortTies(es, arena, level)
	}
}

// comparePrefixes orders two entries by their prefixes, which is by key except among keys of
// more than 8 bytes with one prefix: those it leaves equal, after the shorter keys of that
// prefix (sortTies orders them).
func comparePrefixes(x, y entry) int {
	if c := cmp.Compare(x.prefix, y.prefix); c != 0 {
		return c
	}
	return cmp.Compare(min(x.klen, 9), min(y.klen, 9))
}

// sortTies sorts each run of es (in prefix order) whose keys are longer than 8 bytes and share
// their prefix by the rest of those keys. Keys that share more than their first 8 bytes are
// common (user ids, paths, URLs and timestamps share their first 8 and more): a comparison sort
// read both keys in the arena at every comparison, a cache miss each, where this reads each
// key's next 8 bytes once a level.
func sortTies(es []entry, arena []byte, level int) {
	for i := 0; i < len(es); {
		j := i + 1
		if es[i].klen > 8 {
			for j < len(es) && es[j].prefix == es[i].prefix && es[j].klen > 8 {
				j++
			}
		}
		if j-i > 1 {
			sortRest(es[i:j], arena, level)
		}
		i = j
	}
}

// maxTieLevels bounds sortRest's levels (8 key bytes each); keys still tied after that many
// are compared whole.
const maxTieLevels = 8

// sortRest sorts es, whose keys are longer than 8 bytes and share their first 8, by the rest:
// each entry is shifted 8 key bytes on (its prefix the next 8), sorted as a partition is, and
// shifted back.
func sortRest(es []entry, arena []byte, level int) {
	if level >= maxTieLevels {
		slices.SortFunc(es, func(x, y entry) int { return compareKeys(x, y, arena) })
		return
	}
	shared := es[0].prefix
	for i := range es {
		e := &es[i]
		e.koff, e.klen = e.koff+8, e.klen-8
		e.prefix = keyPrefix(arena[e.koff : e.koff+e.klen])
	}
	sortPrefixesAt(es, arena, 0, level+1)
	for i := range es {
		e := &es[i]
		e.koff, e.klen, e.prefix = e.koff-8, e.klen+8, shared
	}
}

// compareKeys orders two entries by key.
func compareKeys(x, y entry, arena []byte) int {
	if c := cmp.Compare(x.prefix, y.prefix); c != 0 {
		return c
	}
	if x.klen <= 8 || y.klen <= 8 { // the prefix is the whole of a short key: the shorter first
		return cmp.Compare(x.klen, y.klen)
	}
	return bytes.Compare(arena[x.koff:x.koff+x.klen], arena[y.koff:y.koff+y.klen])
}

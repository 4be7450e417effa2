package knownjobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/store"
)

// Wordcount writes size bytes of words drawn from a vocabulary of vocab words into one blob of
// container, and returns the wordcount job over it in shards of shardBytes. Its exact answer is
// counted as the corpus is written.
func Wordcount(ctx context.Context, blob *azblob.Client, container string, vocab, size, shardBytes int) (Job, error) {
	words := make([]string, vocab)
	for i := range words {
		words[i] = "w" + strconv.FormatInt(int64(i), 36)
	}
	rng := rand.New(rand.NewPCG(uint64(vocab), 7))
	var b bytes.Buffer
	b.Grow(size + 16)
	counts := make([]uint64, vocab)
	var total uint64
	for b.Len() < size-16 {
		// Every word of the vocabulary appears (the first pass), then a skewed draw.
		i := int(total)
		if i >= vocab {
			i = int(float64(vocab) * rng.Float64() * rng.Float64())
		}
		b.WriteString(words[i])
		counts[i]++
		total++
		if total%12 == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	if total < uint64(vocab) {
		return Job{}, fmt.Errorf("%d bytes hold only %d of the %d words", size, total, vocab)
	}
	sc := store.New(blob, container)
	if err := sc.Ensure(ctx); err != nil {
		return Job{}, err
	}
	if _, err := blob.UploadBuffer(ctx, container, "corpus.txt", b.Bytes(), nil); err != nil {
		return Job{}, fmt.Errorf("upload corpus: %w", err)
	}
	const top = 10
	idx := make([]int, vocab)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(words[a], words[b]))
	})
	want := builtin.WordcountResult{Total: total}
	for _, i := range idx[:top] {
		want.Top = append(want.Top, builtin.WordFreq{Word: words[i], Count: counts[i]})
	}
	wantJSON, _ := json.Marshal(want)
	shards := (b.Len() + shardBytes - 1) / shardBytes
	p, _ := json.Marshal(builtin.WordcountParams{Container: container, Top: top, ShardBytes: int64(shardBytes)})
	return Job{Type: "wordcount", Params: p, Shards: shards, Check: func(res json.RawMessage) error {
		var got builtin.WordcountResult
		if err := json.Unmarshal(res, &got); err != nil {
			return fmt.Errorf("wordcount result: %v", err)
		}
		if g, _ := json.Marshal(got); !bytes.Equal(g, wantJSON) {
			return fmt.Errorf("wordcount result %s: want %s", g, wantJSON)
		}
		return nil
	}}, nil
}

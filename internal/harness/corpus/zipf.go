package corpus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/store"
)

// ZipfWords is the vocabulary of a ZipfCorpus.
const ZipfWords = 50_000

// ZipfCorpus is the program benchmark's text: words "w<i in base 36>" of a 50k vocabulary, drawn
// Zipf-like (s = 1.1; one draw in four uniform), 12 a line, in files of equal size. The same
// seeds make the same text. Its counts are kept as it is written.
type ZipfCorpus struct {
	Container string
	Prefix    string   // of the blobs' names
	Files     []string // the local copies, one a blob
	Bytes     int64
	Words     int64 // occurrences
	Distinct  int   // words that occur
	counts    [ZipfWords]int64
}

// WriteZipfCorpus writes files files of about size/files bytes each into dir and as blobs
// "<prefix><n>.txt" of container (created).
func WriteZipfCorpus(ctx context.Context, bc *azblob.Client, containerName, prefix string, size int64, files int, dir string) (*ZipfCorpus, error) {
	if size < 1 || files < 1 {
		return nil, fmt.Errorf("zipf corpus: %d bytes in %d files", size, files)
	}
	if err := store.New(bc, containerName).Ensure(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	zc := &ZipfCorpus{Container: containerName, Prefix: prefix}
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, ZipfWords-1)
	var b bytes.Buffer
	for f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.Reset()
		for int64(b.Len()) < size/int64(files) {
			for w := range 12 {
				if w > 0 {
					b.WriteByte(' ')
				}
				i := zipf.Uint64()
				if rng.IntN(4) == 0 {
					i = uint64(rng.IntN(ZipfWords))
				}
				b.WriteByte('w')
				b.Write(strconv.AppendUint(b.AvailableBuffer(), i, 36))
				zc.counts[i]++
			}
			b.WriteByte('\n')
		}
		name := fmt.Sprintf("%d.txt", f)
		local := filepath.Join(dir, name)
		if err := os.WriteFile(local, b.Bytes(), 0o644); err != nil {
			return nil, err
		}
		if _, err := bc.UploadBuffer(ctx, containerName, prefix+name, b.Bytes(), nil); err != nil {
			return nil, fmt.Errorf("upload %s: %w", prefix+name, err)
		}
		zc.Files = append(zc.Files, local)
		zc.Bytes += int64(b.Len())
	}
	for _, n := range zc.counts {
		if n > 0 {
			zc.Words += n
			zc.Distinct++
		}
	}
	return zc, nil
}

// CheckOutput reads a word count job's output (key<TAB>count lines) and checks it with
// CheckCounts.
func (zc *ZipfCorpus) CheckOutput(ctx context.Context, cl *client.Client, id string) error {
	return checkOutput(ctx, cl, id, zc.CheckCounts)
}

// CheckCounts checks word<TAB>count lines, in any order: every word that occurs, once, with
// its count, and nothing else.
func (zc *ZipfCorpus) CheckCounts(r io.Reader) error {
	return checkRecords(r, "word", "w<id>\\t<count>", ZipfWords, zc.Distinct, func(key []byte) (int, bool) {
		i, ok := wordIndex(key)
		return i, ok && i < ZipfWords && zc.counts[i] > 0
	}, func(i int) int64 { return zc.counts[i] })
}

// CounterPy is the program benchmark's Python baseline: one plain process counting the files
// with collections.Counter over str.split, line by line. It prints the distinct words and the
// occurrences.
const CounterPy = `import collections, sys
c = collections.Counter()
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            c.update(line.split())
print(len(c), sum(c.values()))
`

// AwkCount is the awk baseline: the map of examples/programs/wordcount.sh (each field, its
// backslashes doubled, counted in an array) run by one awk process over every file, with no
// shuffle and no reduce.
const AwkCount = `{ for (i = 1; i <= NF; i++) { w = $i; gsub(/\\/, "&&", w); c[w]++ } } END { for (w in c) print w "\t" c[w] }`

// CounterBaseline runs CounterPy with the interpreter py over the local files (the script is
// written into dir), checks its totals and returns its wall time and CPU.
func (zc *ZipfCorpus) CounterBaseline(ctx context.Context, py, dir string) (CountRun, error) {
	script := filepath.Join(dir, "counter.py")
	if err := os.WriteFile(script, []byte(CounterPy), 0o644); err != nil {
		return CountRun{}, err
	}
	defer os.Remove(script)
	out, run, err := runCount(ctx, py, append([]string{script}, zc.Files...)...)
	if err != nil {
		return run, err
	}
	if want := fmt.Sprintf("%d %d", zc.Distinct, zc.Words); strings.TrimSpace(string(out)) != want {
		return run, fmt.Errorf("counter.py printed %q, want %q (distinct words, occurrences)", clip(string(out), 60), want)
	}
	return run, nil
}

// AwkBaseline runs AwkCount in one awk process over the local files, checks every count and
// returns its wall time and CPU.
func (zc *ZipfCorpus) AwkBaseline(ctx context.Context) (CountRun, error) {
	out, run, err := runCount(ctx, "awk", append([]string{AwkCount}, zc.Files...)...)
	if err != nil {
		return run, err
	}
	return run, zc.CheckCounts(bytes.NewReader(out))
}

// Python returns the python3 on PATH as the interpreter's own path (sys.executable): a pyenv
// shim costs about 0.6 CPU-seconds more a start.
func Python(ctx context.Context) (string, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", errors.New("python3 is not installed (not on PATH): install it (apt-get install -y python3) to measure program jobs")
	}
	out, err := exec.CommandContext(ctx, py, "-c", "import sys; print(sys.executable)").Output()
	if p := strings.TrimSpace(string(out)); err == nil && p != "" {
		return p, nil
	}
	return py, nil
}

// Package corpus makes word-count corpora with known answers and the baselines a keyed job
// is judged against: a single-process Go count and Dask over the same files, and for program
// jobs one Python or awk process.
package corpus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/store"
)

// WordCorpus is a generated word-count corpus: Distinct words "w<i in base 36>", word i
// appearing Repeat × (1 + i%9) times (5 × Repeat on average), in an order spread over Blobs
// blobs of Container.
type WordCorpus struct {
	Container string
	Distinct  int
	Repeat    int64 // each word's count is Repeat × WordCount(i); 1 unless made by WriteWordCorpusSized
	Blobs     int
	Bytes     int64
	Words     int64  // occurrences
	Dir       string // a local copy of the blobs (for programs that cannot read Azure), or ""
}

// WordCount is how many times word i appears in a WordCorpus of Repeat 1.
func WordCount(i int) int64 { return 1 + int64(i%9) }

// Count is how many times word i appears in wc.
func (wc *WordCorpus) Count(i int) int64 { return max(wc.Repeat, 1) * WordCount(i) }

// WriteWordCorpusSized writes a corpus of distinct words of about size bytes (container
// created; with dir set, the same files into dir): each word repeats as often as that takes,
// so a small vocabulary makes a corpus as big as a large one (at least one pass of every word).
func WriteWordCorpusSized(ctx context.Context, bc *azblob.Client, containerName string, distinct, blobs int, size int64, dir string) (*WordCorpus, error) {
	if distinct < 1 || blobs < 1 || size < 1 {
		return nil, fmt.Errorf("word corpus: %d words in %d blobs of %d bytes in all", distinct, blobs, size)
	}
	return writeWordCorpus(ctx, bc, containerName, distinct, blobs, max(1, (size+passBytes(distinct)/2)/passBytes(distinct)), dir)
}

// passBytes is the size of one pass of a corpus of distinct words (Repeat 1): every occurrence
// is 'w', the word's digits and a separator.
func passBytes(distinct int) int64 {
	var n int64
	for i := range distinct {
		n += (2 + int64(len(strconv.FormatInt(int64(i), 36)))) * WordCount(i)
	}
	return n
}

// WriteWordCorpus writes a corpus of distinct words into container (created) and, with dir
// set, the same files into dir.
func WriteWordCorpus(ctx context.Context, bc *azblob.Client, containerName string, distinct, blobs int, dir string) (*WordCorpus, error) {
	if distinct < 1 || blobs < 1 {
		return nil, fmt.Errorf("word corpus: %d words in %d blobs", distinct, blobs)
	}
	return writeWordCorpus(ctx, bc, containerName, distinct, blobs, 1, dir)
}

func writeWordCorpus(ctx context.Context, bc *azblob.Client, containerName string, distinct, blobs int, repeat int64, dir string) (*WordCorpus, error) {
	if err := store.New(bc, containerName).Ensure(ctx); err != nil {
		return nil, err
	}
	wc := &WordCorpus{Container: containerName, Distinct: distinct, Repeat: repeat, Blobs: blobs, Dir: dir}
	for i := range distinct {
		wc.Words += wc.Count(i)
	}
	perBlob := (wc.Words + int64(blobs) - 1) / int64(blobs)
	// Occurrence j is in round r = j's pass over the words (9 × repeat passes; word i is in
	// passes r with i%9 ≥ r%9); a pass visits the words in an order spread by a stride coprime
	// with distinct, so a blob holds words from all over.
	stride := 1
	for _, s := range []int{7919, 104729, 1299709, 15485863} {
		if distinct%s != 0 {
			stride = s
			break
		}
	}
	var buf bytes.Buffer
	blob, inBlob, onLine := 0, int64(0), 0
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		name := fmt.Sprintf("corpus/%03d.txt", blob)
		if _, err := bc.UploadBuffer(ctx, containerName, name, buf.Bytes(), nil); err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
		if dir != "" {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.txt", blob)), buf.Bytes(), 0o644); err != nil {
				return err
			}
		}
		wc.Bytes += int64(buf.Len())
		buf.Reset()
		blob, inBlob, onLine = blob+1, 0, 0
		return nil
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	for pass := range 9 * repeat {
		r := int(pass % 9)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for k := range distinct {
			i := int((int64(k) * int64(stride)) % int64(distinct))
			if i%9 < r {
				continue
			}
			buf.WriteByte('w')
			buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(i), 36))
			inBlob++
			if onLine++; onLine == 12 || inBlob == perBlob {
				buf.WriteByte('\n')
				onLine = 0
			} else {
				buf.WriteByte(' ')
			}
			if inBlob == perBlob {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	wc.Blobs = blob
	return wc, nil
}

// CheckOutput reads a wordcount job's output (key<TAB>count lines, streamed) and checks that
// every word of the corpus appears once, with its count, and nothing else.
func (wc *WordCorpus) CheckOutput(ctx context.Context, cl *client.Client, id string) error {
	return checkOutput(ctx, cl, id, wc.CheckCounts)
}

// checkOutput streams job id's output, as key<TAB>value lines, into check.
func checkOutput(ctx context.Context, cl *client.Client, id string, check func(io.Reader) error) error {
	pr, pw := io.Pipe()
	go func() {
		_, err := cl.WriteOutput(ctx, id, pw, client.OutputOptions{Format: client.FormatTSV})
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	return check(pr)
}

// CheckCounts checks word<TAB>count lines, in any order, against the corpus.
func (wc *WordCorpus) CheckCounts(r io.Reader) error {
	return checkRecords(r, "word", "w<id>\\t<count>", wc.Distinct, wc.Distinct, func(key []byte) (int, bool) {
		i, ok := wordIndex(key)
		return i, ok && i < wc.Distinct
	}, wc.Count)
}

// wordIndex is i of a word "w<i in base 36>".
func wordIndex(key []byte) (int, bool) {
	if len(key) < 2 || key[0] != 'w' {
		return 0, false
	}
	i, err := strconv.ParseUint(string(key[1:]), 36, 31)
	return int(i), err == nil
}

// checkRecords checks key<TAB>integer lines, in any order, against a corpus's answer: index
// places a key among the corpus's n (false: no key of it), want is the value at a place, and
// the output holds records keys, each once. noun and shape name the keys in errors.
func checkRecords(r io.Reader, noun, shape string, n, records int, index func(key []byte) (int, bool), want func(i int) int64) error {
	seen := make([]bool, n)
	got := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		key, value, ok := bytes.Cut(sc.Bytes(), []byte("\t"))
		i, known := index(key)
		v, err := strconv.ParseInt(string(value), 10, 64)
		if !ok || !known || err != nil {
			return fmt.Errorf("output line %q: want %s of a %s of the corpus", clip(sc.Text(), 60), shape, noun)
		}
		if seen[i] {
			return fmt.Errorf("%s %s appears twice in the output", noun, key)
		}
		seen[i] = true
		if v != want(i) {
			return fmt.Errorf("%s %s: %d, want %d", noun, key, v, want(i))
		}
		got++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read output: %w", err)
	}
	if got != records {
		return fmt.Errorf("output has %d %ss, want %d", got, noun, records)
	}
	return nil
}

// CountRun is one run of a single-process count (the wcount command) over a corpus.
type CountRun struct {
	Wall time.Duration
	CPU  time.Duration // user + system CPU of the process
}

// CountBaseline runs the wcount binary bin (naive or fast) over the corpus's local copy as a
// process of its own, checks every count and returns its wall time and CPU.
func (wc *WordCorpus) CountBaseline(ctx context.Context, bin string, naive bool, dir string) (CountRun, error) {
	if wc.Dir == "" {
		return CountRun{}, errors.New("count: the corpus has no local copy")
	}
	out := filepath.Join(dir, "wordcount-single.tsv")
	defer os.Remove(out)
	args := []string{"-out", out, wc.Dir}
	if naive {
		args = append([]string{"-naive"}, args...)
	}
	_, run, err := runCount(ctx, bin, args...)
	if err != nil {
		return run, err
	}
	return run, wc.CheckFiles(out)
}

// runCount runs a single-process count and returns its stdout, wall time and CPU.
func runCount(ctx context.Context, name string, args ...string) ([]byte, CountRun, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	run := CountRun{Wall: time.Since(start)}
	if err != nil {
		return nil, run, fmt.Errorf("%s: %v: %s", name, err, clip(stderr.String(), 300))
	}
	run.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return stdout.Bytes(), run, nil
}

// DaskBaseline runs RunDask into a folder under dir, checks every count and removes the folder.
func (wc *WordCorpus) DaskBaseline(ctx context.Context, script string, workers int, dir string) (*DaskResult, error) {
	out := filepath.Join(dir, "wordcount-dask")
	defer os.RemoveAll(out)
	res, err := RunDask(ctx, script, wc, out, workers)
	if err != nil {
		return nil, err
	}
	parts, err := filepath.Glob(filepath.Join(out, "part-*"))
	if err != nil || len(parts) == 0 {
		return nil, fmt.Errorf("dask wrote no part files in %s (%v)", out, err)
	}
	return res, wc.CheckFiles(parts...)
}

// CheckFiles checks word<TAB>count files together against the corpus.
func (wc *WordCorpus) CheckFiles(paths ...string) error {
	var rs []io.Reader
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rs = append(rs, f)
	}
	return wc.CheckCounts(io.MultiReader(rs...))
}

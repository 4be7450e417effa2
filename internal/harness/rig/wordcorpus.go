package rig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// WordCorpus is a generated word-count corpus: Distinct words "w<i in base 36>", word i
// appearing 1 + i%9 times (5 on average), in an order spread over Blobs blobs of Container.
type WordCorpus struct {
	Container string
	Distinct  int
	Blobs     int
	Bytes     int64
	Words     int64  // occurrences
	Dir       string // a local copy of the blobs (for programs that cannot read Azure), or ""
}

// WordCount is how many times word i appears in a WordCorpus.
func WordCount(i int) int64 { return 1 + int64(i%9) }

// WriteWordCorpus writes a corpus of distinct words into container (created) and, with dir
// set, the same files into dir.
func WriteWordCorpus(ctx context.Context, bc *azblob.Client, containerName string, distinct, blobs int, dir string) (*WordCorpus, error) {
	if distinct < 1 || blobs < 1 {
		return nil, fmt.Errorf("word corpus: %d words in %d blobs", distinct, blobs)
	}
	if err := store.New(bc, containerName).Ensure(ctx); err != nil {
		return nil, err
	}
	wc := &WordCorpus{Container: containerName, Distinct: distinct, Blobs: blobs, Dir: dir}
	for i := range distinct {
		wc.Words += WordCount(i)
	}
	perBlob := (wc.Words + int64(blobs) - 1) / int64(blobs)
	// Occurrence j is in round r = j's pass over the words; a pass visits the words in an order
	// spread by a stride coprime with distinct, so a blob holds words from all over.
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
	for r := range 9 {
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
	pr, pw := io.Pipe()
	go func() {
		_, err := cl.WriteOutput(ctx, id, pw, client.OutputOptions{Format: client.FormatTSV})
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	return wc.CheckCounts(pr)
}

// CheckCounts checks word<TAB>count lines, in any order, against the corpus.
func (wc *WordCorpus) CheckCounts(r io.Reader) error {
	seen := make([]uint64, (wc.Distinct+63)/64)
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		word, count, ok := bytes.Cut(sc.Bytes(), []byte("\t"))
		if !ok || len(word) < 2 || word[0] != 'w' {
			return fmt.Errorf("output line %q: want w<id>\\t<count>", Clip(sc.Text(), 60))
		}
		i, err := strconv.ParseInt(string(word[1:]), 36, 64)
		c, err2 := strconv.ParseInt(string(count), 10, 64)
		if err != nil || err2 != nil || i < 0 || i >= int64(wc.Distinct) {
			return fmt.Errorf("output line %q: not a word of the corpus", Clip(sc.Text(), 60))
		}
		if seen[i/64]&(1<<(i%64)) != 0 {
			return fmt.Errorf("word %s appears twice in the output", word)
		}
		seen[i/64] |= 1 << (i % 64)
		if c != WordCount(int(i)) {
			return fmt.Errorf("word %s counted %d times, want %d", word, c, WordCount(int(i)))
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read output: %w", err)
	}
	if n != wc.Distinct {
		return fmt.Errorf("output has %d words, want %d", n, wc.Distinct)
	}
	return nil
}

// CountWordsGo is the single-process baseline: it downloads the corpus's blobs with workers
// goroutines, counts their words (runs of non-space bytes) in a map per goroutine, merges the
// maps, and writes every word's count, sorted, to out. It returns the time from the first
// download to the last line written.
func CountWordsGo(ctx context.Context, bc *azblob.Client, wc *WordCorpus, workers int, out io.Writer) (time.Duration, error) {
	start := time.Now()
	var names []string
	pager := bc.NewListBlobsFlatPager(wc.Container, &container.ListBlobsFlatOptions{Prefix: ptr("corpus/")})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	work := make(chan string, len(names))
	for _, n := range names {
		work <- n
	}
	close(work)
	maps := make([]map[string]int64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := make(map[string]int64, wc.Distinct/workers)
			for name := range work {
				resp, err := bc.DownloadStream(ctx, wc.Container, name, nil)
				if err != nil {
					errs[w] = err
					return
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs[w] = err
					return
				}
				for len(data) > 0 {
					i := bytes.IndexAny(data, " \n\t\r")
					if i < 0 {
						i = len(data)
					}
					if i > 0 {
						m[string(data[:i])]++
					}
					data = data[min(i+1, len(data)):]
				}
			}
			maps[w] = m
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	all := maps[0]
	for _, m := range maps[1:] {
		for k, v := range m {
			all[k] += v
		}
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bw := bufio.NewWriterSize(out, 256<<10)
	line := make([]byte, 0, 64)
	for _, k := range keys {
		line = append(append(append(line[:0], k...), '\t'), strconv.AppendInt(nil, all[k], 10)...)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return 0, err
		}
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func ptr[T any](v T) *T { return &v }

// DaskResult is what scripts/dask_wordcount.py reports.
type DaskResult struct {
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
	Files   int     `json:"files"`
	Workers int     `json:"workers"`
	Python  string  `json:"python"` // the interpreter that ran it
}

// DaskInstall is what to run where no Python on the machine imports Dask.
const DaskInstall = "apt-get update && apt-get install -y python3-dask python3-distributed (or set DASK_PYTHON to a Python that has dask and distributed)"

// DaskPython returns the first interpreter that imports dask.bag and dask.distributed, trying
// $DASK_PYTHON, the system's Python (where apt installs Dask), then python3 on PATH (which may be
// a pyenv shim that does not see apt's packages). The error lists every one tried.
func DaskPython(ctx context.Context) (string, error) {
	var tried []string
	for _, py := range daskCandidates() {
		out, err := exec.CommandContext(ctx, py, "-c", "import dask.bag, dask.distributed").CombinedOutput()
		if err == nil {
			return py, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s", py, Clip(strings.TrimSpace(lastLineOr(out, err)), 120)))
	}
	return "", fmt.Errorf("dask is not installed: no Python here imports dask.distributed (tried %s); install it: %s",
		strings.Join(tried, "; "), DaskInstall)
}

func daskCandidates() []string {
	var c []string
	if py := os.Getenv("DASK_PYTHON"); py != "" {
		c = append(c, py)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		c = append(c, "/usr/bin/python3")
	}
	if p, err := exec.LookPath("python3"); err == nil && p != "/usr/bin/python3" {
		c = append(c, p)
	}
	if len(c) == 0 {
		c = append(c, "python3")
	}
	return c
}

func lastLineOr(out []byte, err error) string {
	if l := lastLine(out); len(bytes.TrimSpace(l)) > 0 {
		return string(l)
	}
	return err.Error()
}

// DaskCommand is the command line RunDask runs with the interpreter py.
func DaskCommand(py, script, src, out string, workers int) []string {
	return []string{py, script, "--workers", strconv.Itoa(workers), src, out}
}

// RunDask runs the Dask word count over the corpus's local copy, writing every count under out
// (part files), and returns its timing and the interpreter it used. It fails with what to
// install when no Python here has Dask.
func RunDask(ctx context.Context, script string, wc *WordCorpus, out string, workers int) (*DaskResult, error) {
	if wc.Dir == "" {
		return nil, errors.New("dask: the corpus has no local copy")
	}
	py, err := DaskPython(ctx)
	if err != nil {
		return nil, err
	}
	args := DaskCommand(py, script, wc.Dir, out, workers)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %v: %s", args, err, Clip(stderr.String(), 600))
	}
	var res DaskResult
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(stdout.Bytes())), &res); err != nil {
		return nil, fmt.Errorf("dask output %q: %v", Clip(stdout.String(), 200), err)
	}
	res.Python = py
	return &res, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// RSSSampler samples the resident memory of a cluster's workers.
type RSSSampler struct {
	stop chan struct{}
	done chan struct{}

	mu            sync.Mutex
	leader, other float64 // peak MiB
	samples       int
}

// SampleRSS samples every worker of c every interval until Stop: the leader's peak and the
// other workers' peak, in MiB.
func SampleRSS(ctx context.Context, c *cluster.Cluster, every time.Duration) *RSSSampler {
	s := &RSSSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			leader := ""
			if l, err := c.Leader(ctx); err == nil && l != nil {
				leader = l.ID
			}
			for _, id := range c.Running() {
				p := c.Proc(id)
				if p == nil {
					continue
				}
				rss, err := ProcRSS(p.PID)
				if err != nil {
					continue
				}
				mib := float64(rss) / (1 << 20)
				s.mu.Lock()
				if id == leader {
					s.leader = max(s.leader, mib)
				} else {
					s.other = max(s.other, mib)
				}
				s.samples++
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the peaks in MiB and the number of samples.
func (s *RSSSampler) Stop() (leaderMiB, otherMiB float64, samples int) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return Round3(s.leader), Round3(s.other), s.samples
}

// PutBigResultJobs stores n succeeded jobs of type "wordcount" whose result.json is size bytes
// (a JSON value, as a big aggregate left it), with their spec and status record, and returns
// their ids: what `worker status` must list without reading.
func PutBigResultJobs(ctx context.Context, c *cluster.Cluster, n int, size int) ([]string, error) {
	sc, ok := c.Client.Store.(*store.Container)
	if !ok {
		return nil, fmt.Errorf("the cluster's store is a %T", c.Client.Store)
	}
	big := make([]byte, 0, size)
	big = append(big, `{"words":"`...)
	for len(big) < size-2 {
		big = append(big, 'x')
	}
	big = append(big, `"}`...)
	var ids []string
	for range n {
		now := time.Now().UTC()
		id := protocol.NewID(now)
		spec := &protocol.Spec{ID: id, Type: "wordcount", Params: json.RawMessage(`{"container":"big-results"}`), SubmittedAt: now}
		data, err := spec.Encode()
		if err != nil {
			return nil, err
		}
		if _, err := sc.Put(ctx, protocol.SpecBlob(id), data, store.Cond{}); err != nil {
			return nil, err
		}
		if _, err := sc.Put(ctx, protocol.ResultBlob(id), big, store.Cond{}); err != nil {
			return nil, err
		}
		cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "wordcount", State: jobs.StateSucceeded,
			PlanEpoch: 1, WriterEpoch: 1, Total: 1, DoneCount: 1, Dispatched: 1, UpdatedAt: now, FinishedAt: &now}
		cpData, err := cp.Encode()
		if err != nil {
			return nil, err
		}
		md, err := protocol.NewStatusRecord(&cp, spec).Metadata()
		if err != nil {
			return nil, err
		}
		if _, err := sc.PutMeta(ctx, protocol.CheckpointBlob(id), cpData, md, store.Cond{}); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// TimeCommand runs the worker binary of c with args (as a CLI on c's environment) runs times and
// returns each wall time, from exec to exit.
func TimeCommand(ctx context.Context, c *cluster.Cluster, runs int, args ...string) ([]float64, error) {
	var out []float64
	for range runs {
		cmd := exec.CommandContext(ctx, c.Options().WorkerBin, args...)
		cmd.Env = c.WorkerEnv("cli")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("worker %v: %v: %s", args, err, Clip(stderr.String(), 300))
		}
		out = append(out, Round3(time.Since(start).Seconds()))
	}
	return out, nil
}

// KeyedWordcount is how a keyed wordcount of a WordCorpus went.
type KeyedWordcount struct {
	Outcome
	LeaderPeakMiB, FollowerPeakMiB float64
	OutputS                        float64 // reading and checking every output record
}

// RunKeyedWordcount submits wordcount with "output":"blob" over wc on c, samples the workers'
// RSS until it ends, and checks every output record: Exact means the manifest and each word's
// count are right.
func RunKeyedWordcount(ctx context.Context, c *cluster.Cluster, wc *WordCorpus, timeout time.Duration) (KeyedWordcount, error) {
	p, _ := json.Marshal(map[string]any{"container": wc.Container, "prefix": "corpus/", "output": "blob", "shard_bytes": 8 << 20})
	job := knownjobs.Job{Type: "wordcount", Params: p, Check: func(res json.RawMessage) error {
		var m protocol.OutputManifest
		if !protocol.IsOutputManifest(res) || json.Unmarshal(res, &m) != nil {
			return fmt.Errorf("result %.80s is not an output manifest", res)
		}
		if m.Records != int64(wc.Distinct) {
			return fmt.Errorf("manifest of %d records, want %d", m.Records, wc.Distinct)
		}
		return nil
	}}
	var kw KeyedWordcount
	rss := SampleRSS(ctx, c, 100*time.Millisecond)
	id, start, err := Submit(ctx, c, job)
	if err != nil {
		rss.Stop()
		return kw, err
	}
	kw.Outcome, err = Await(ctx, c, job, id, start, timeout, nil)
	kw.LeaderPeakMiB, kw.FollowerPeakMiB, _ = rss.Stop()
	if err != nil || !kw.Exact {
		return kw, err
	}
	t0 := time.Now()
	if err := wc.CheckOutput(ctx, c.Client, id); err != nil {
		kw.Exact, kw.Problem = false, fmt.Sprintf("job %s: output: %v", id, err)
	}
	kw.OutputS = Round3(time.Since(t0).Seconds())
	return kw, nil
}

// GoBaseline runs CountWordsGo with workers goroutines into a file under dir, checks every count
// and removes the file.
func (wc *WordCorpus) GoBaseline(ctx context.Context, bc *azblob.Client, workers int, dir string) (time.Duration, error) {
	out := filepath.Join(dir, "wordcount-go.tsv")
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	defer os.Remove(out)
	d, err := CountWordsGo(ctx, bc, wc, workers, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = wc.CheckFiles(out)
	}
	return d, err
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

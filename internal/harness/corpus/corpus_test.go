package corpus

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The corpus and the Go baseline agree with the corpus's own counts, and the
// check catches a wrong count, a missing word and a repeated one.
func TestWordCorpus_Baselines(t *testing.T) {
	ctx := context.Background()
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wc, err := WriteWordCorpus(ctx, bc, testenv.Name(t, "corpus"), 5000, 7, filepath.Join(dir, "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	if wc.Blobs != 7 || wc.Words != 24990 || wc.Bytes < wc.Words*3 {
		t.Fatalf("corpus %+v", wc)
	}
	files, err := Files(wc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var naive, out bytes.Buffer
	if err := CountNaive(files, &naive); err != nil {
		t.Fatal(err)
	}
	if err := wc.CheckCounts(&naive); err != nil {
		t.Fatalf("naive count: %v", err)
	}
	if err := CountFast(files, 2, &out); err != nil {
		t.Fatal(err)
	}
	if err := wc.CheckCounts(bytes.NewReader(out.Bytes())); err != nil {
		t.Fatalf("fast count: %v", err)
	}
	assertRejects(t, wc.CheckCounts, out.String(), "wzzzz\t1\n")
	bin := filepath.Join(dir, "wcount")
	if b, err := exec.Command("go", "build", "-o", bin, "./wcount").CombinedOutput(); err != nil {
		t.Fatalf("go build ./wcount: %v\n%s", err, b)
	}
	for _, naive := range []bool{false, true} {
		if r, err := wc.CountBaseline(ctx, bin, naive, dir); err != nil || r.Wall <= 0 || r.CPU <= 0 {
			t.Fatalf("CountBaseline(naive %v): %+v, %v", naive, r, err)
		}
	}
}

// The fast count agrees with strings.FieldsFunc(unicode.IsSpace) on text with Unicode spaces,
// invalid UTF-8 and chunk boundaries everywhere.
func TestCountFast_AgreesWithFieldsFunc(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	atoms := []string{"a", "b", "ab", "é", "\u00a0", "\u2003", "\u3000", " ", "\n", "\t", "\xff", "\xe2\x80", "\u0085", "word", "\r\n"}
	dir := t.TempDir()
	want := map[string]int64{}
	var files []string
	for f := range 5 {
		var b strings.Builder
		for range 3000 {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		for _, w := range strings.FieldsFunc(b.String(), unicode.IsSpace) {
			want[w]++
		}
		name := filepath.Join(dir, fmt.Sprint(f))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	for _, size := range []int64{1, 7, 64, 4 << 20} {
		chunks, err := planChunks(files, size)
		if err != nil {
			t.Fatal(err)
		}
		tab := newWordTable(4)
		var buf []byte
		for _, c := range chunks {
			if err := countChunk(tab, c, &buf); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]int64{}
		for i := range tab.slots {
			if e := &tab.slots[i]; e.count > 0 {
				got[string(tab.key(e))] += e.count
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("chunks of %d: %d distinct words, want %d", size, len(got), len(want))
		}
	}
	var naive bytes.Buffer
	if err := CountNaive(files, &naive); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSuffix(naive.String(), "\n"), "\n") {
		w, n, _ := strings.Cut(line, "\t")
		got[w], _ = strconv.ParseInt(n, 10, 64)
	}
	if !maps.Equal(got, want) {
		t.Errorf("naive: %d distinct words, want %d", len(got), len(want))
	}
	for _, workers := range []int{1, 3} {
		var fast bytes.Buffer
		if err := CountFast(files, workers, &fast); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, line := range strings.Split(strings.TrimSuffix(fast.String(), "\n"), "\n") {
			w, n, _ := strings.Cut(line, "\t")
			if _, dup := got[w]; dup {
				t.Errorf("fast, %d goroutines: %q written twice", workers, w)
			}
			got[w], _ = strconv.ParseInt(n, 10, 64)
		}
		if !maps.Equal(got, want) {
			t.Errorf("fast, %d goroutines: %d distinct words, want %d", workers, len(got), len(want))
		}
	}
}

// The Dask script agrees with the corpus's counts. Dask is the benchmark's peer, not something
// `make test` installs: the test runs where a Python with Dask is found and is required under
// MAPAGG_DASK=1 (make bench-peers, which installs it); elsewhere it skips, naming what to install.
func TestWordCorpus_Dask(t *testing.T) {
	ctx := context.Background()
	if _, err := DaskPython(ctx); err != nil {
		if os.Getenv("MAPAGG_DASK") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wc, err := WriteWordCorpus(ctx, bc, testenv.Name(t, "corpus"), 5000, 7, filepath.Join(dir, "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("../../../scripts/dask_wordcount.py")
	if r, err := wc.DaskBaseline(ctx, script, 2, dir); err != nil || r.Seconds <= 0 {
		t.Fatalf("DaskBaseline: %+v, %v", r, err)
	}
	res, err := RunDask(ctx, script, wc, filepath.Join(dir, "dask"), 2)
	if err != nil {
		t.Fatal(err)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "dask", "part-*"))
	var all bytes.Buffer
	for _, p := range parts {
		b, _ := os.ReadFile(p)
		all.Write(b)
	}
	if err := wc.CheckCounts(&all); err != nil || res.Bytes != wc.Bytes || res.Seconds <= 0 {
		t.Fatalf("dask: %+v, %v", res, err)
	}
}

// Without Dask anywhere, RunDask fails with what to install and which interpreters it tried.
func TestDaskPython_NamesTheInstall(t *testing.T) {
	t.Setenv("DASK_PYTHON", filepath.Join(t.TempDir(), "no-such-python"))
	t.Setenv("PATH", t.TempDir())
	_, err := DaskPython(context.Background())
	if _, statErr := os.Stat("/usr/bin/python3"); statErr == nil && err == nil {
		t.Skip("/usr/bin/python3 has Dask; the missing case cannot be made here")
	}
	if err == nil || !strings.Contains(err.Error(), "python3-dask") || !strings.Contains(err.Error(), "no-such-python") {
		t.Fatalf("err = %v", err)
	}
}

// A sized corpus repeats a small vocabulary to about the size asked, and both counts agree
// with its counts.
func TestWriteWordCorpusSized_RepeatsToTheSize(t *testing.T) {
	ctx := context.Background()
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := WriteWordCorpusSized(ctx, bc, testenv.Name(t, "sized"), 500, 5, 200_000, filepath.Join(t.TempDir(), "c"))
	if err != nil {
		t.Fatal(err)
	}
	var pass int64
	for i := range 500 {
		pass += WordCount(i)
	}
	if wc.Repeat < 10 || wc.Bytes < 180_000 || wc.Bytes > 220_000 || wc.Words != pass*wc.Repeat {
		t.Fatalf("corpus %+v: want about 200,000 bytes of 500 words repeated", wc)
	}
	files, err := Files(wc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, count := range map[string]func([]string, *bytes.Buffer) error{
		"naive": func(f []string, b *bytes.Buffer) error { return CountNaive(f, b) },
		"fast":  func(f []string, b *bytes.Buffer) error { return CountFast(f, 2, b) },
	} {
		var out bytes.Buffer
		if err := count(files, &out); err != nil {
			t.Fatal(err)
		}
		if err := wc.CheckCounts(&out); err != nil {
			t.Errorf("%s count: %v", name, err)
		}
	}
}

// The CSV corpus's sums agree with the naive program, run as a process, and CheckSums catches
// a wrong sum, a missing user and a repeated one.
func TestCSVCorpus_NaiveSum(t *testing.T) {
	ctx := context.Background()
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cc, err := WriteCSVCorpus(ctx, bc, testenv.Name(t, "csv"), "sales/", 20_000, 1_000, 4, filepath.Join(dir, "csv"))
	if err != nil {
		t.Fatal(err)
	}
	if cc.Blobs != 4 || cc.Bytes < 20_000*12 {
		t.Fatalf("corpus %+v", cc)
	}
	files, err := Files(cc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := SumCSVNaive(files, &out); err != nil {
		t.Fatal(err)
	}
	if err := cc.CheckSums(bytes.NewReader(out.Bytes())); err != nil {
		t.Fatalf("naive sum: %v", err)
	}
	assertRejects(t, cc.CheckSums, out.String(), "nobody\t1\n")
	if err := os.WriteFile(filepath.Join(cc.Dir, "bad.csv"), []byte("user,amount\nuser00001,x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, _ = Files(cc.Dir)
	if err := SumCSVNaive(files, io.Discard); err == nil || !strings.Contains(err.Error(), "bad.csv:2") {
		t.Errorf("a bad row: %v, want an error naming bad.csv:2", err)
	}
	os.Remove(filepath.Join(cc.Dir, "bad.csv"))
	bin := filepath.Join(dir, "csvsum")
	if b, err := exec.Command("go", "build", "-o", bin, "./csvsum").CombinedOutput(); err != nil {
		t.Fatalf("go build ./csvsum: %v\n%s", err, b)
	}
	if r, err := cc.SumBaseline(ctx, bin, dir); err != nil || r.Wall <= 0 {
		t.Fatalf("SumBaseline: %+v, %v", r, err)
	}
}

// The Zipf corpus's counts agree with an independent count of its files (strings.Fields), the
// awk and Python baselines agree with them, and the check catches a wrong count, a missing
// word, a repeated one and a foreign one.
func TestZipfCorpus_Baselines(t *testing.T) {
	ctx := context.Background()
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	zc, err := WriteZipfCorpus(ctx, bc, testenv.Name(t, "zipf"), "corpus/", 400_000, 4, filepath.Join(dir, "c"))
	if err != nil {
		t.Fatal(err)
	}
	if len(zc.Files) != 4 || zc.Bytes < 400_000 || zc.Bytes > 410_000 || zc.Distinct < 10_000 || zc.Distinct > ZipfWords {
		t.Fatalf("corpus of %d bytes, %d distinct words in %d files: want about 400,000 bytes of 10k to 50k words in 4", zc.Bytes, zc.Distinct, len(zc.Files))
	}
	counts := map[string]int{}
	for _, name := range zc.Files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range strings.Fields(string(b)) {
			counts[w]++
		}
	}
	var out strings.Builder
	for w, n := range counts {
		fmt.Fprintf(&out, "%s\t%d\n", w, n)
	}
	assertRejects(t, zc.CheckCounts, out.String(), "wzzzzz\t1\n")
	if r, err := zc.AwkBaseline(ctx); err != nil || r.Wall <= 0 {
		t.Errorf("AwkBaseline: %+v, %v", r, err)
	}
	py, err := Python(ctx)
	if err != nil {
		t.Skip(err)
	}
	if r, err := zc.CounterBaseline(ctx, py, dir); err != nil || r.Wall <= 0 {
		t.Errorf("CounterBaseline: %+v, %v", r, err)
	}
}

// assertRejects checks that check accepts out (key<TAB>value lines) but not out with a line
// missing, a line repeated, a value changed, or a foreign line added.
func assertRejects(t *testing.T, check func(io.Reader) error, out, foreign string) {
	t.Helper()
	if err := check(strings.NewReader(out)); err != nil {
		t.Fatalf("the right output refused: %v", err)
	}
	lines := strings.SplitAfter(out, "\n")
	for name, bad := range map[string]string{
		"missing":  strings.Join(lines[1:], ""),
		"repeated": lines[0] + out,
		"wrong":    strings.Replace(out, "\t", "\t9", 1),
		"foreign":  foreign + out,
	} {
		if err := check(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

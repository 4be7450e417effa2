package corpus

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	var out bytes.Buffer
	if _, err := CountWordsGo(ctx, bc, wc, 2, &out); err != nil {
		t.Fatal(err)
	}
	if err := wc.CheckCounts(bytes.NewReader(out.Bytes())); err != nil {
		t.Fatalf("go baseline: %v", err)
	}
	lines := strings.SplitAfter(out.String(), "\n")
	for name, bad := range map[string]string{
		"missing":  strings.Join(lines[1:], ""),
		"repeated": lines[0] + out.String(),
		"wrong":    strings.Replace(out.String(), "\t", "\t9", 1),
	} {
		if err := wc.CheckCounts(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: CheckCounts accepted it", name)
		}
	}
	if d, err := wc.GoBaseline(ctx, bc, 2, dir); err != nil || d <= 0 {
		t.Fatalf("GoBaseline: %v, %v", d, err)
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

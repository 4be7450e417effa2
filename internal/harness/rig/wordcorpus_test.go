package rig

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

// The corpus, the Go baseline and the Dask script agree with the corpus's own counts, and the
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

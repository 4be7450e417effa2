package transfer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/transfer"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTransfer_PutGet_RoundTripAndResume(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha\n", "sub/b.txt": strings.Repeat("b", 5<<20), "sub/deep/c.txt": ""}
	writeFiles(t, src, files)
	single := filepath.Join(t.TempDir(), "one.txt")
	writeFiles(t, filepath.Dir(single), map[string]string{"one.txt": "one\n"})
	cname := testenv.Name(t, "put") // does not exist yet: Put creates it

	items, err := transfer.PlanPut([]string{src, single}, "in")
	if err != nil {
		t.Fatal(err)
	}
	var moved int64
	tr := &transfer.Copier{Blob: bc, Parallel: 3, Progress: func(n int64) { moved += n }}
	st, err := tr.Put(ctx, cname, items)
	if err != nil || st.Files != 4 || st.Skipped != 0 || st.Bytes != 5<<20+10 || moved != st.Bytes {
		t.Fatalf("Put = %+v, %v (progress %d)", st, err, moved)
	}
	// A put run again copies nothing; a changed file is copied again.
	if st, err := tr.Put(ctx, cname, items); err != nil || st.Files != 0 || st.Skipped != 4 {
		t.Fatalf("second Put = %+v, %v; want everything skipped", st, err)
	}
	writeFiles(t, src, map[string]string{"a.txt": "ALPHA\n"})
	if st, err := tr.Put(ctx, cname, items); err != nil || st.Files != 1 || st.Skipped != 3 {
		t.Fatalf("Put after a change = %+v, %v; want one file copied", st, err)
	}

	dst := t.TempDir()
	gets, err := tr.PlanGet(ctx, cname, "in/", dst)
	if err != nil || len(gets) != 4 {
		t.Fatalf("PlanGet = %+v, %v", gets, err)
	}
	if st, err := tr.Get(ctx, cname, gets); err != nil || st.Files != 4 {
		t.Fatalf("Get = %+v, %v", st, err)
	}
	want := map[string]string{"a.txt": "ALPHA\n", "sub/b.txt": files["sub/b.txt"], "sub/deep/c.txt": "", "one.txt": "one\n"}
	if got := readTree(t, dst); len(got) != len(want) || got["a.txt"] != want["a.txt"] || got["sub/b.txt"] != want["sub/b.txt"] || got["one.txt"] != "one\n" {
		t.Fatalf("got files %v", keys(got))
	}
	if st, err := tr.Get(ctx, cname, gets); err != nil || st.Files != 0 || st.Skipped != 4 {
		t.Fatalf("second Get = %+v, %v; want everything skipped", st, err)
	}
	// A local file that differs from its blob is replaced.
	writeFiles(t, dst, map[string]string{"one.txt": "two\n"})
	if st, err := tr.Get(ctx, cname, gets); err != nil || st.Files != 1 || readTree(t, dst)["one.txt"] != "one\n" {
		t.Fatalf("Get over a changed file = %+v, %v", st, err)
	}
	// One blob by its name; a prefix that is not a folder takes nothing of its neighbours.
	if one, err := tr.PlanGet(ctx, cname, "in/sub/b.txt", dst); err != nil || len(one) != 1 || one[0].Local != filepath.Join(dst, "b.txt") {
		t.Fatalf("PlanGet of one blob = %+v, %v", one, err)
	}
	if _, err := tr.PlanGet(ctx, cname, "in/su", dst); err == nil || !strings.Contains(err.Error(), "no blobs") {
		t.Fatalf("PlanGet of a partial folder name: %v, want no blobs", err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTransfer_Refusals(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, map[string]string{"x.txt": "1"})
	writeFiles(t, b, map[string]string{"x.txt": "2"})
	if _, err := transfer.PlanPut([]string{a, b}, "p"); err == nil || !strings.Contains(err.Error(), `both be blob "p/x.txt"`) {
		t.Errorf("PlanPut of two files onto one blob: %v", err)
	}
	if _, err := transfer.PlanPut([]string{filepath.Join(a, "nope")}, ""); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("PlanPut of a missing path: %v", err)
	}
	for _, target := range []string{"Bad_Name/x", "ab/", "c//d", "-ab/x"} {
		if _, _, err := transfer.SplitTarget(target); err == nil {
			t.Errorf("SplitTarget(%q) accepted", target)
		}
	}
	if c, p, err := transfer.SplitTarget("corpus/in/2026"); c != "corpus" || p != "in/2026" || err != nil {
		t.Errorf("SplitTarget = %q %q %v", c, p, err)
	}
	// A blob whose name would leave the target folder is refused before anything is written.
	cname := testenv.Name(t, "evil")
	c := store.New(bc, cname)
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "in/../../escape", []byte("x"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	tr := &transfer.Copier{Blob: bc}
	if _, err := tr.PlanGet(ctx, cname, "in", dst); err == nil || !strings.Contains(err.Error(), "cannot be a local path") {
		t.Errorf("PlanGet of in/../../escape: %v", err)
	}
	if _, err := tr.PlanGet(ctx, testenv.Name(t, "none"), "", dst); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("PlanGet of a missing container: %v", err)
	}
}

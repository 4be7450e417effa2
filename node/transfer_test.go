package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

func TestPutGet_Commands(t *testing.T) {
	c := newCluster(t)
	n := c.node(t, builtin.Registry())
	src := t.TempDir()
	for name, text := range map[string]string{"a.txt": "the cat\n", "sub/b.txt": "the dog\n"} {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	corpus := testenv.Name(t, "corpus")
	code, out, errOut := run(t, n, "put", src, corpus+"/in")
	if code != 0 || !strings.Contains(out, "put 2 files, 16 B to "+corpus+"/in") || !strings.Contains(out, "0 already there") {
		t.Fatalf("put: %d %q %q", code, out, errOut)
	}
	if code, out, _ := run(t, n, "put", src, corpus+"/in"); code != 0 || !strings.Contains(out, "put 0 files") || !strings.Contains(out, "2 already there") {
		t.Fatalf("put again: %d %q", code, out)
	}
	dst := t.TempDir()
	if code, out, errOut := run(t, n, "get", corpus+"/in", dst); code != 0 || !strings.Contains(out, "got 2 files") {
		t.Fatalf("get: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "b.txt")); err != nil || string(b) != "the dog\n" {
		t.Fatalf("sub/b.txt = %q, %v", b, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"put", src}, "expected LOCAL... CONTAINER/PREFIX"},
		{[]string{"put", src, "Bad_Container/x"}, "container name"},
		{[]string{"put", filepath.Join(src, "missing"), corpus}, "missing"},
		{[]string{"get", "NotAJob", dst}, "neither a job id nor CONTAINER/PREFIX"},
		{[]string{"get", corpus + "/in", dst, "--format", "jsonl"}, "--format is for a job's records"},
		{[]string{"put", src, corpus, "--parallel", "0"}, "--parallel 0"},
	} {
		if code, _, errOut := run(t, n, tt.args...); code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
	if code, _, errOut := run(t, n, "get", "20261125-120000-0000beef", dst); code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("get of a job that does not exist: %d %q", code, errOut)
	}
}

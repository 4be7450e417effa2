package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testoutput"
	"github.com/mapagg/mapagg/internal/transfer"
	"github.com/mapagg/mapagg/store"
)

func TestTransfer_GetOutput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	testoutput.Put(t, e.jobs, keyedID, keyedParts)
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.cl.Output(ctx, keyedID)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := &transfer.Copier{Blob: bc}
	st, err := tr.GetOutput(ctx, keyedID, m, dir, client.FormatTSV)
	if err != nil || st.Files != 3 {
		t.Fatalf("GetOutput = %+v, %v", st, err)
	}
	got := readTransferTree(t, dir)
	if got["part-00000.tsv"] != "apple\t3\ntab\\tkey\t{\"n\":1}\n" || got["part-00001.tsv"] != "" ||
		got["part-00002.tsv"] != "line\\nbreak\tv\\\\x\nzebra\t[1,2]\n7\tnull\n" || got[transfer.OutputManifestFile] == "" {
		t.Fatalf("files %q", got)
	}
	if st, err := tr.GetOutput(ctx, keyedID, m, dir, client.FormatTSV); err != nil || st.Files != 0 || st.Skipped != 3 {
		t.Fatalf("second GetOutput = %+v, %v; want all skipped", st, err)
	}
	if _, err := tr.GetOutput(ctx, "20261125-120000-0000cafe", m, dir, client.FormatTSV); err == nil || !strings.Contains(err.Error(), "another job") {
		t.Fatalf("GetOutput into another job's folder: %v", err)
	}
}

func readTransferTree(t *testing.T, root string) map[string]string {
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

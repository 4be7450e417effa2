package transfer

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/store"
)

// Copier copies files between a local disk and blob containers (`worker put` and `worker
// get`): files in parallel, each resumable (a file already in place is skipped).
type Copier struct {
	// Blob is the storage account's blob client (store.Clients.Data). Required.
	Blob *azblob.Client
	// Parallel is how many files move at once. Default 8.
	Parallel int
	// Progress, when set, is told each chunk of bytes moved (or skipped as already there); it is
	// called from one goroutine at a time.
	Progress func(n int64)

	mu sync.Mutex
}

// Stats counts what Put or Get did.
type Stats struct {
	Files   int   `json:"files"`   // copied
	Bytes   int64 `json:"bytes"`   // copied
	Skipped int   `json:"skipped"` // already in place
}

// PutItem is one local file and the blob it goes to.
type PutItem struct {
	Local string
	Blob  string
	Size  int64
}

// GetItem is one blob and the local file it goes to.
type GetItem struct {
	Blob  string
	Local string
	Size  int64
}

// SplitTarget splits CONTAINER/PREFIX into its container and blob prefix, refusing a name Azure
// would refuse.
func SplitTarget(target string) (containerName, prefix string, err error) {
	containerName, prefix, _ = strings.Cut(target, "/")
	if err := CheckContainerName(containerName); err != nil {
		return "", "", err
	}
	if strings.HasPrefix(prefix, "/") || strings.Contains(prefix, "//") {
		return "", "", fmt.Errorf("%q: the blob prefix %q has an empty folder name", target, prefix)
	}
	return containerName, prefix, nil
}

// CheckContainerName reports whether name can name a blob container: 3 to 63 characters of a-z,
// 0-9 and '-', starting and ending with a letter or digit, no "--".
func CheckContainerName(name string) error {
	bad := len(name) < 3 || len(name) > 63 || strings.Contains(name, "--") ||
		name[0] == '-' || name[len(name)-1] == '-'
	for i := 0; i < len(name) && !bad; i++ {
		c := name[i]
		bad = !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if bad {
		return fmt.Errorf("container name %q: use 3 to 63 characters of a-z, 0-9 and '-' (not first, last or doubled)", clip(name))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:79] + "…"
	}
	return s
}

// PlanPut lists the files of locals and the blobs they become under prefix: a file becomes
// prefix + its base name, a folder's files prefix + their path inside the folder. It refuses a
// missing path and two files that would land on one blob, before anything is copied.
func PlanPut(locals []string, prefix string) ([]PutItem, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	var items []PutItem
	from := map[string]string{}
	add := func(local, rel string, size int64) error {
		name := prefix + filepath.ToSlash(rel)
		if len(name) > 1024 {
			return fmt.Errorf("%s: blob name %q is over Azure's 1024 characters", local, clip(name))
		}
		if prev, dup := from[name]; dup {
			return fmt.Errorf("%s and %s would both be blob %q: put them under different prefixes", prev, local, name)
		}
		from[name] = local
		items = append(items, PutItem{Local: local, Blob: name, Size: size})
		return nil
	}
	for _, l := range locals {
		fi, err := os.Stat(l)
		if err != nil {
			return nil, fmt.Errorf("put %s: %w", l, err)
		}
		if !fi.IsDir() {
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("put %s: not a regular file or a folder", l)
			}
			if err := add(l, filepath.Base(l), fi.Size()); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(l, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			fi, err := os.Stat(p) // follows a link to a file
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil // a socket, a device, a link to a folder: not data
			}
			rel, err := filepath.Rel(l, p)
			if err != nil {
				return err
			}
			return add(p, rel, fi.Size())
		})
		if err != nil {
			return nil, fmt.Errorf("put %s: %w", l, err)
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("put %s: no files to upload", strings.Join(locals, " "))
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Blob < items[j].Blob })
	return items, nil
}

// Put uploads items to containerName, creating the container when it is missing. A blob that
// already holds the file's content (its Content-MD5 matches) is skipped, so a put that stopped
// can be run again to finish.
func (t *Copier) Put(ctx context.Context, containerName string, items []PutItem) (Stats, error) {
	cc := t.Blob.ServiceClient().NewContainerClient(containerName)
	if _, err := cc.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return Stats{}, fmt.Errorf("create container %s: %w", containerName, err)
	}
	var st Stats
	err := t.each(ctx, len(items), func(ctx context.Context, i int) error {
		copied, err := t.putOne(ctx, cc, items[i])
		if err == nil {
			t.count(&st, copied, items[i].Size)
		}
		return err
	})
	return st, err
}

func (t *Copier) putOne(ctx context.Context, cc *container.Client, it PutItem) (bool, error) {
	f, err := os.Open(it.Local)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", it.Local, err)
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, fmt.Errorf("put %s: %w", it.Local, err)
	}
	sum := h.Sum(nil)
	bc := cc.NewBlockBlobClient(it.Blob)
	if p, err := bc.GetProperties(ctx, nil); err == nil && bytes.Equal(p.ContentMD5, sum) {
		t.progress(it.Size)
		return false, nil
	} else if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
		return false, fmt.Errorf("put %s: read %s: %w", it.Local, it.Blob, err)
	}
	var sent int64
	_, err = bc.UploadFile(ctx, f, &blockblob.UploadFileOptions{
		BlockSize: 4 << 20, Concurrency: 4,
		HTTPHeaders: &blob.HTTPHeaders{BlobContentMD5: sum},
		Progress: func(n int64) {
			if d := n - sent; d > 0 {
				sent = n
				t.progress(d)
			}
		},
	})
	if err != nil {
		return false, fmt.Errorf("put %s as %s: %w", it.Local, it.Blob, err)
	}
	t.progress(it.Size - sent)
	return true, nil
}

// PlanGet lists the blobs under prefix in containerName and the files under dir they become:
// prefix names a folder ("in" and "in/" both take in/*, each file named for its path below it)
// or one blob. It refuses a blob whose name cannot be a local path.
func (t *Copier) PlanGet(ctx context.Context, containerName, prefix, dir string) ([]GetItem, error) {
	cc := t.Blob.ServiceClient().NewContainerClient(containerName)
	folder := strings.TrimSuffix(prefix, "/")
	var items []GetItem
	pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &folder})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			return nil, fmt.Errorf("get %s/%s: container %q does not exist", containerName, prefix, containerName)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", containerName, prefix, err)
		}
		for _, b := range page.Segment.BlobItems {
			name := *b.Name
			var rel string
			switch {
			case folder == "":
				rel = name
			case name == folder && !strings.HasSuffix(prefix, "/"):
				rel = path.Base(name)
			case strings.HasPrefix(name, folder+"/"):
				rel = name[len(folder)+1:]
			default:
				continue // "input.txt" is not in folder "in"
			}
			if err := checkLocalName(rel); err != nil {
				return nil, fmt.Errorf("get %s/%s: blob %q: %w", containerName, prefix, clip(name), err)
			}
			var size int64
			if b.Properties != nil && b.Properties.ContentLength != nil {
				size = *b.Properties.ContentLength
			}
			items = append(items, GetItem{Blob: name, Local: filepath.Join(dir, filepath.FromSlash(rel)), Size: size})
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("get %s/%s: no blobs there", containerName, prefix)
	}
	return items, nil
}

// checkLocalName refuses a relative blob name that would leave the target folder or name it.
func checkLocalName(rel string) error {
	if rel == "" {
		return errors.New("its name below the prefix is empty")
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New(`its name has an empty, "." or ".." folder: it cannot be a local path`)
		}
	}
	if strings.ContainsRune(rel, 0) || strings.ContainsRune(rel, '\\') {
		return errors.New("its name holds a NUL or a backslash: it cannot be a local path")
	}
	return nil
}

// Get downloads items from containerName. A file whose size and content match its blob
// (Content-MD5 when the blob has one, else its modification time, which Get sets) is skipped; a
// file is written beside its place and renamed when whole, so a get that stopped leaves no
// half file and can be run again to finish.
func (t *Copier) Get(ctx context.Context, containerName string, items []GetItem) (Stats, error) {
	cc := t.Blob.ServiceClient().NewContainerClient(containerName)
	var st Stats
	err := t.each(ctx, len(items), func(ctx context.Context, i int) error {
		copied, err := t.getOne(ctx, cc, items[i])
		if err == nil {
			t.count(&st, copied, items[i].Size)
		}
		return err
	})
	return st, err
}

func (t *Copier) getOne(ctx context.Context, cc *container.Client, it GetItem) (bool, error) {
	bc := cc.NewBlobClient(it.Blob)
	p, err := bc.GetProperties(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	if sameFile(it.Local, p) {
		t.progress(it.Size)
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(it.Local), 0o755); err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(it.Local), "."+filepath.Base(it.Local)+".*.partial")
	if err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	var got int64
	etag := p.ETag
	_, err = bc.DownloadFile(ctx, tmp, &blob.DownloadFileOptions{
		BlockSize: 4 << 20, Concurrency: 4,
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: etag}},
		Progress: func(n int64) {
			if d := n - got; d > 0 {
				got = n
				t.progress(d)
			}
		},
	})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if bloberror.HasCode(err, bloberror.ConditionNotMet) {
		err = errors.New("it changed while being read: run get again")
	}
	if err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	if p.LastModified != nil {
		_ = os.Chtimes(tmp.Name(), *p.LastModified, *p.LastModified)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	if err := os.Rename(tmp.Name(), it.Local); err != nil {
		return false, fmt.Errorf("get %s: %w", it.Blob, err)
	}
	t.progress(it.Size - got)
	return true, nil
}

// sameFile reports whether the file at local already holds the blob p describes.
func sameFile(local string, p blob.GetPropertiesResponse) bool {
	fi, err := os.Stat(local)
	if err != nil || !fi.Mode().IsRegular() || p.ContentLength == nil || fi.Size() != *p.ContentLength {
		return false
	}
	if len(p.ContentMD5) > 0 {
		f, err := os.Open(local)
		if err != nil {
			return false
		}
		defer f.Close()
		h := md5.New()
		if _, err := io.Copy(h, f); err != nil {
			return false
		}
		return bytes.Equal(h.Sum(nil), p.ContentMD5)
	}
	return p.LastModified != nil && fi.ModTime().Equal(*p.LastModified)
}

// OutputManifestFile is the file GetOutput writes first in its folder: the job's output manifest,
// which tells a later GetOutput into the same folder which job it holds.
const OutputManifestFile = "_manifest.json"

// OutputPlan is what GetOutput writes: one file a partition.
type OutputPlan struct {
	Manifest *client.OutputManifest
	Files    []string // by partition
	Bytes    int64    // stored size of every partition, for progress
}

// GetOutput downloads a succeeded keyed job's output records into dir, one file a partition
// (part-00000.tsv, ...), in format (FormatTSV or FormatJSONL), each checked against the
// manifest. A partition file already there is skipped, so a get that stopped can be run again;
// dir holding another job's output is refused.
func (t *Copier) GetOutput(ctx context.Context, id string, m *client.OutputManifest, dir, format string) (Stats, error) {
	format = cmp.Or(format, client.FormatTSV)
	if err := (client.OutputOptions{Format: format}).Check(); err != nil {
		return Stats{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stats{}, fmt.Errorf("get %s: %w", id, err)
	}
	mpath := filepath.Join(dir, OutputManifestFile)
	want, err := json.MarshalIndent(struct {
		Job    string `json:"job"`
		Format string `json:"format"`
		*client.OutputManifest
	}{id, format, m}, "", "  ")
	if err != nil {
		return Stats{}, err
	}
	if have, err := os.ReadFile(mpath); err == nil && !bytes.Equal(have, want) {
		return Stats{}, fmt.Errorf("get %s: %s holds another job's output, or this one's in another format (see %s): use an empty folder",
			id, dir, mpath)
	}
	if err := os.WriteFile(mpath, want, 0o644); err != nil {
		return Stats{}, fmt.Errorf("get %s: %w", id, err)
	}
	rr := store.New(t.Blob, m.Container)
	var st Stats
	err = t.each(ctx, len(m.Partitions), func(ctx context.Context, i int) error {
		p := m.Partitions[i]
		local := filepath.Join(dir, fmt.Sprintf("part-%05d.%s", p.Partition, format))
		if _, err := os.Stat(local); err == nil { // renamed into place only when whole
			t.progress(p.Bytes)
			t.count(&st, false, p.Bytes)
			return nil
		}
		tmp, err := os.CreateTemp(dir, "."+filepath.Base(local)+".*.partial")
		if err != nil {
			return fmt.Errorf("get %s: %w", id, err)
		}
		defer os.Remove(tmp.Name())
		ow, err := shuffle.NewOutputWriter(tmp, format)
		if err != nil {
			tmp.Close()
			return err
		}
		pr := &progressReader{rr: rr, t: t}
		err = shuffle.CopyOutputPartition(ctx, pr, id, m, p, ow)
		if err == nil {
			err = ow.Flush()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), local)
		}
		if err != nil {
			return fmt.Errorf("get %s: %w", id, err)
		}
		t.count(&st, true, p.Bytes)
		return nil
	})
	return st, err
}

// progressReader reports the bytes read from each blob it opens.
type progressReader struct {
	rr *store.Container
	t  *Copier
}

func (p *progressReader) ReadRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	rc, err := p.rr.ReadRange(ctx, name, off, n)
	if err != nil {
		return nil, err
	}
	return &progressBody{ReadCloser: rc, t: p.t}, nil
}

type progressBody struct {
	io.ReadCloser
	t *Copier
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.t.progress(int64(n))
	return n, err
}

// each runs do(0..n-1) Parallel at a time and returns the first error (the rest are stopped).
func (t *Copier) each(ctx context.Context, n int, do func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(t.Parallel, 8))
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return do(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

func (t *Copier) progress(n int64) {
	if t.Progress == nil || n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Progress(n)
}

func (t *Copier) count(st *Stats, copied bool, size int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if copied {
		st.Files++
		st.Bytes += size
	} else {
		st.Skipped++
	}
}

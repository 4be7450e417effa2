package corpus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/store"
)

// CSVCorpus is a generated table of "user,amount" rows with a header line per blob: Rows rows
// over Keys users ("user" and five or more digits), row j of user (j × stride) % Keys with amount
// (j × 7919) % 1000, spread over Blobs blobs of Container. Its per-user sums are known.
type CSVCorpus struct {
	Container string
	Prefix    string // of the blobs' names
	Rows      int
	Keys      int
	Blobs     int
	Bytes     int64
	Dir       string // a local copy of the blobs, or ""
	sums      []int64
}

// CSVHeader is the first line of every blob of a CSVCorpus.
const CSVHeader = "user,amount"

// CSVUser is the name of user i in a CSVCorpus.
func CSVUser(i int) string { return fmt.Sprintf("user%05d", i) }

// WriteCSVCorpus writes rows rows over keys users into container (created) under prefix, in
// blobs blobs, and with dir set the same files into dir. Two million rows over 100,000 users are
// about 28 MB.
func WriteCSVCorpus(ctx context.Context, bc *azblob.Client, containerName, prefix string, rows, keys, blobs int, dir string) (*CSVCorpus, error) {
	if rows < 1 || keys < 1 || blobs < 1 || blobs > rows {
		return nil, fmt.Errorf("csv corpus: %d rows over %d users in %d blobs", rows, keys, blobs)
	}
	if err := store.New(bc, containerName).Ensure(ctx); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	cc := &CSVCorpus{Container: containerName, Prefix: prefix, Rows: rows, Keys: keys, Blobs: blobs, Dir: dir, sums: make([]int64, keys)}
	stride := coprimeStride(keys)
	perBlob := (rows + blobs - 1) / blobs
	var buf bytes.Buffer
	for b, j := 0, 0; j < rows; b++ {
		buf.Reset()
		buf.WriteString(CSVHeader + "\n")
		for end := min(j+perBlob, rows); j < end; j++ {
			u := int((int64(j) * int64(stride)) % int64(keys))
			amount := int64(j) * 7919 % 1000
			cc.sums[u] += amount
			buf.WriteString(CSVUser(u))
			buf.WriteByte(',')
			buf.Write(strconv.AppendInt(buf.AvailableBuffer(), amount, 10))
			buf.WriteByte('\n')
		}
		name := fmt.Sprintf("%s%03d.csv", prefix, b)
		if _, err := bc.UploadBuffer(ctx, containerName, name, buf.Bytes(), nil); err != nil {
			return nil, fmt.Errorf("upload %s: %w", name, err)
		}
		if dir != "" {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.csv", b)), buf.Bytes(), 0o644); err != nil {
				return nil, err
			}
		}
		cc.Bytes += int64(buf.Len())
		cc.Blobs = b + 1
	}
	return cc, nil
}

// coprimeStride is a prime that does not divide n, so i → i × stride % n visits every residue.
func coprimeStride(n int) int {
	for _, s := range []int{7919, 104729, 1299709, 15485863} {
		if n%s != 0 {
			return s
		}
	}
	return 1
}

// CheckSums checks user<TAB>sum lines, in any order, against the corpus: every user that has a
// row appears once, with its sum, and nothing else.
func (cc *CSVCorpus) CheckSums(r io.Reader) error {
	// The stride visits every user in the first Keys rows.
	return checkRecords(r, "user", "user<digits>\\t<sum>", cc.Keys, min(cc.Rows, cc.Keys), func(key []byte) (int, bool) {
		i, err := strconv.Atoi(strings.TrimPrefix(string(key), "user"))
		return i, err == nil && i >= 0 && i < cc.Keys && string(key) == CSVUser(i)
	}, func(i int) int64 { return cc.sums[i] })
}

// SumCSVNaive is the per-user sum a newcomer writes in Go: bufio lines, strings.Cut at the comma,
// strconv.ParseInt, a map[string]int64, one goroutine. The header line is skipped; a row that is
// not user,amount is an error naming the file and line.
func SumCSVNaive(files []string, out io.Writer) error {
	sums := make(map[string]int64)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		line := 0
		for sc.Scan() {
			line++
			user, amount, ok := strings.Cut(sc.Text(), ",")
			if line == 1 && sc.Text() == CSVHeader {
				continue
			}
			n, err := strconv.ParseInt(amount, 10, 64)
			if !ok || err != nil {
				f.Close()
				return fmt.Errorf("%s:%d: %q is not user,amount", filepath.Base(name), line, clip(sc.Text(), 60))
			}
			sums[user] += n
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	for u, n := range sums {
		bw.WriteString(u)
		bw.WriteByte('\t')
		bw.WriteString(strconv.FormatInt(n, 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// SumBaseline runs the csvsum binary bin over the corpus's local copy as a process of its own,
// checks every sum and returns its wall time and CPU.
func (cc *CSVCorpus) SumBaseline(ctx context.Context, bin, dir string) (CountRun, error) {
	if cc.Dir == "" {
		return CountRun{}, errors.New("csv sum: the corpus has no local copy")
	}
	out := filepath.Join(dir, "csvsum-single.tsv")
	defer os.Remove(out)
	_, run, err := runCount(ctx, bin, "-out", out, cc.Dir)
	if err != nil {
		return run, err
	}
	f, err := os.Open(out)
	if err != nil {
		return run, err
	}
	defer f.Close()
	return run, cc.CheckSums(f)
}

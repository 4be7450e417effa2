// Package joblog keeps a job's log: one append blob beside its spec, <job>/log, of JSON lines that
// job code logged (jobs' env.Logger()), each with its worker, shard and attempt.
//
// Workers append in batches (Handler buffers an attempt's lines; Flush writes them in one append).
// Readers read from a byte offset, so following costs one ranged read a poll. The blob is bounded
// (MaxBytes): past it, appends are dropped and one last line says so.
//
// Not guaranteed: lines of an attempt whose worker dies before Flush are lost, and the
// truncation line may be written twice by two workers.
package joblog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/internal/protocol"
)

// MaxBytes bounds a job's log.
const MaxBytes = 8 << 20

// maxLine bounds one line's message and attributes as stored.
const maxLine = 8 << 10

// Blob is the blob of job id's log.
func Blob(id string) string { return id + "/log" }

// Line is one line of a job's log.
type Line struct {
	At      time.Time         `json:"at"`
	Level   string            `json:"level"` // DEBUG, INFO, WARN, ERROR
	Msg     string            `json:"msg"`
	Worker  string            `json:"worker,omitempty"`
	Shard   *int              `json:"shard,omitempty"`
	Attempt int               `json:"attempt,omitempty"`
	Source  string            `json:"source,omitempty"` // "" job code (env.Logger), "stderr" a program's
	TraceID string            `json:"trace_id,omitempty"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// Page is what Read returns: lines from an offset, and the offset after them.
type Page struct {
	Lines []Line `json:"lines"`
	Next  int64  `json:"next"` // the offset to read from next (follow)
	// Truncated: the log reached MaxBytes; later lines were dropped.
	Truncated bool `json:"truncated,omitempty"`
}

// Log appends to and reads jobs' logs in the jobs container.
type Log struct {
	cc *container.Client
}

// New returns the job logs of containerName (the jobs container).
func New(bc *azblob.Client, containerName string) *Log {
	return &Log{cc: bc.ServiceClient().NewContainerClient(containerName)}
}

// ErrFull is returned by Append once a job's log reached MaxBytes.
var ErrFull = errors.New("the job's log is full")

const truncatedMsg = "log truncated: the job's log reached its limit; later lines were dropped"

// Append adds lines to job id's log, in one write (a worker batches its lines). Lines past the
// limit are dropped with ErrFull, after one line saying so. This is the function other
// parts call to put a line in a job's log (a program job's stderr, a worker's note).
func (l *Log) Append(ctx context.Context, id string, lines ...Line) error {
	if err := protocol.CheckID(id); err != nil {
		return err
	}
	if len(lines) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, ln := range lines {
		buf.Write(encodeLine(ln))
	}
	ab := l.cc.NewAppendBlobClient(Blob(id))
	err := l.appendBlock(ctx, ab, buf.Bytes())
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		if _, cerr := ab.Create(ctx, &appendblob.CreateOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}}); cerr != nil &&
			!bloberror.HasCode(cerr, bloberror.BlobAlreadyExists) {
			return fmt.Errorf("create the log of job %s: %w", id, cerr)
		}
		err = l.appendBlock(ctx, ab, buf.Bytes())
	}
	if bloberror.HasCode(err, bloberror.MaxBlobSizeConditionNotMet) {
		// Full: one last line says so (it may be written twice by two workers; it is short).
		note := encodeLine(Line{At: time.Now().UTC(), Level: "WARN", Msg: truncatedMsg, Source: "mapagg"})
		_, _ = ab.AppendBlock(ctx, nopCloser{bytes.NewReader(note)}, nil)
		return fmt.Errorf("job %s: %w (%d bytes)", id, ErrFull, MaxBytes)
	}
	if err != nil {
		return fmt.Errorf("append to the log of job %s: %w", id, err)
	}
	return nil
}

func (l *Log) appendBlock(ctx context.Context, ab *appendblob.Client, data []byte) error {
	_, err := ab.AppendBlock(ctx, nopCloser{bytes.NewReader(data)}, &appendblob.AppendBlockOptions{
		AppendPositionAccessConditions: &appendblob.AppendPositionAccessConditions{MaxSize: to.Ptr(int64(MaxBytes))}})
	return err
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// encodeLine is ln as one JSON line, its message and attributes clipped.
func encodeLine(ln Line) []byte {
	if len(ln.Msg) > maxLine {
		ln.Msg = ln.Msg[:maxLine] + "…"
	}
	for k, v := range ln.Attrs {
		if len(v) > maxLine/4 {
			ln.Attrs[k] = v[:maxLine/4] + "…"
		}
	}
	b, err := json.Marshal(ln)
	if err != nil {
		b, _ = json.Marshal(Line{At: ln.At, Level: ln.Level, Msg: "unencodable log line: " + err.Error()})
	}
	return append(b, '\n')
}

// Read returns job id's log lines from byte offset on (0: the start), at most limit lines
// (0: 1000). A job with no log yet has none. A line that does not decode is shown as such.
func (l *Log) Read(ctx context.Context, id string, offset int64, limit int) (*Page, error) {
	if err := protocol.CheckID(id); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%w: log offset %d: use 0 or a next of an earlier read", protocol.ErrBadSpec, offset)
	}
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	page := &Page{Lines: []Line{}, Next: offset}
	resp, err := l.cc.NewBlobClient(Blob(id)).DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: offset}})
	switch {
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		return page, nil
	case bloberror.HasCode(err, bloberror.InvalidRange):
		return page, nil // nothing past offset yet
	case err != nil:
		return nil, fmt.Errorf("read the log of job %s: %w", id, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for len(page.Lines) < limit {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			page.Next += int64(len(line))
			var ln Line
			if jerr := json.Unmarshal(line, &ln); jerr != nil {
				ln = Line{Level: "WARN", Msg: "undecodable log line: " + protocol.Clip(string(line), 200), Source: "mapagg"}
			}
			if ln.Msg == truncatedMsg {
				page.Truncated = true
			}
			page.Lines = append(page.Lines, ln)
		}
		if err == io.EOF {
			break // a partial last line is read again next time
		}
		if err != nil {
			return nil, fmt.Errorf("read the log of job %s: %w", id, err)
		}
	}
	return page, nil
}

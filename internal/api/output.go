package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
)

var _ OutputService = (*client.Client)(nil)

// OutputService is the optional part of a JobService that reads keyed jobs' output;
// *client.Client has it.
type OutputService interface {
	Output(ctx context.Context, id string) (*client.OutputManifest, error)
	WriteOutput(ctx context.Context, id string, w io.Writer, opts client.OutputOptions) (client.OutputStats, error)
}

// MaxOutputStream bounds one GET /jobs/{id}/output; the API's usual 30 s bound does not apply.
const MaxOutputStream = time.Hour

// apiOutput streams a succeeded keyed job's output records: GET /api/v1/jobs/{id}/output
// [?partition=N][&format=tsv|jsonl]. Errors found before the first byte get a status and a
// JSON body; a failure mid-stream aborts the response, so a client never takes a short output
// for a whole one.
func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	out, ok := s.cfg.Jobs.(OutputService)
	if !ok {
		writeErr(w, http.StatusServiceUnavailable, "job output is not available on this worker")
		return
	}
	id, q := r.PathValue("id"), r.URL.Query()
	opts := client.OutputOptions{Format: q.Get("format")}
	for k := range q {
		if k != "format" && k != "partition" {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: use partition and format", k))
			return
		}
	}
	if v := q.Get("partition"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("partition %q: want a partition number from 0", v))
			return
		}
		opts.Partition = &p
	}
	if err := opts.Check(); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	m, err := out.Output(r.Context(), id)
	switch {
	case errors.Is(err, client.ErrNotKeyed):
		writeErr(w, http.StatusConflict, fmt.Sprintf("job %s's result is a value, not output records: GET %s/jobs/%s/result", id, Prefix, id))
		return
	case err != nil:
		writeError(w, err)
		return
	case opts.Partition != nil && *opts.Partition >= len(m.Partitions):
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("job %s has %d partitions (0 to %d): no partition %d", id, len(m.Partitions), len(m.Partitions)-1, *opts.Partition))
		return
	}
	ctype := "text/tab-separated-values; charset=utf-8"
	if opts.Format == client.FormatJSONL {
		ctype = "application/jsonl"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	records := m.Records
	if opts.Partition != nil {
		records = m.Partitions[*opts.Partition].Records
	}
	w.Header().Set("X-Output-Records", strconv.FormatInt(records, 10))
	// The stream outlives the API's 30 s bound; a client that leaves fails the next write.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), MaxOutputStream)
	defer cancel()
	cw := &countingWriter{w: w}
	if _, err := out.WriteOutput(ctx, id, cw, opts); err != nil {
		if cw.n == 0 {
			w.Header().Del("X-Output-Records")
			writeError(w, err)
			return
		}
		s.cfg.Logger.Warn("job output stream failed", "job", id, "err", protocol.Redact(err.Error()))
		panic(http.ErrAbortHandler)
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

package shuffle

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// spillFile is a local file of runs, one per partition in partition order: a map buffer's
// spill, or an intermediate merge of spills.
type spillFile struct {
	f       *os.File
	offsets []int64 // run p is bytes offsets[p] to offsets[p+1]
}

// tempFiles creates and removes the spill files of one task.
type tempFiles struct {
	dir   string
	files []*os.File
}

func (t *tempFiles) create() (*os.File, error) {
	f, err := os.CreateTemp(t.dir, "mapagg-spill-*")
	if err != nil {
		return nil, fmt.Errorf("create spill file: %w", err)
	}
	t.files = append(t.files, f)
	return f, nil
}

// remove closes and deletes f (nil: every file).
func (t *tempFiles) remove(f *os.File) {
	kept := t.files[:0]
	for _, g := range t.files {
		if f == nil || g == f {
			_ = g.Close()
			_ = os.Remove(g.Name())
			continue
		}
		kept = append(kept, g)
	}
	t.files = kept
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

// spillWriter writes the runs of a spill file, partition after partition.
type spillWriter struct {
	sf  *spillFile
	bw  *bufio.Writer
	cw  *countingWriter
	rw  *RunWriter
	blk int
}

const spillWriteBuffer = 32 << 10

func newSpillWriter(f *os.File, blockBytes int) *spillWriter {
	bw := bufio.NewWriterSize(f, spillWriteBuffer)
	return &spillWriter{sf: &spillFile{f: f}, bw: bw, cw: &countingWriter{w: bw}, blk: blockBytes}
}

// startRun ends the previous run and starts partition p's.
func (s *spillWriter) startRun(p int) error {
	if s.rw != nil {
		if err := s.rw.Close(); err != nil {
			return err
		}
	}
	s.sf.offsets = append(s.sf.offsets, s.cw.n)
	var err error
	s.rw, err = NewRunWriter(s.cw, p, s.blk)
	return err
}

// finish ends the last run and flushes the file.
func (s *spillWriter) finish() (*spillFile, error) {
	if s.rw != nil {
		if err := s.rw.Close(); err != nil {
			return nil, err
		}
	}
	s.sf.offsets = append(s.sf.offsets, s.cw.n)
	if err := s.bw.Flush(); err != nil {
		return nil, fmt.Errorf("write spill file: %w", err)
	}
	return s.sf, nil
}

// open returns a reader of partition p's run in the file.
func (sf *spillFile) open(p int) (*RunReader, error) {
	off := sf.offsets[p]
	rr, err := NewRunReader(io.NewSectionReader(sf.f, off, sf.offsets[p+1]-off))
	if err != nil {
		return nil, err
	}
	if rr.Partition() != p {
		return nil, corrupt("spill run of partition %d where %d belongs", rr.Partition(), p)
	}
	return rr, nil
}

func (sf *spillFile) size() int64 { return sf.offsets[len(sf.offsets)-1] }

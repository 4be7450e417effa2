package rig

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// StoreSnapshot is a copy of a nats-server process's JetStream store, taken while the process
// was paused, to roll the store back to. That is what a crash loses when the file store had not
// synced its tail to disk (JetStream fsyncs on an interval).
type StoreSnapshot struct {
	np  *devserver.NATSProcess
	dir string
}

// SnapshotStore pauses np (SIGSTOP), copies its store and lets it go on (SIGCONT).
func SnapshotStore(np *devserver.NATSProcess) (*StoreSnapshot, error) {
	src := filepath.Join(np.Dir, "store")
	dst := filepath.Join(np.Dir, "store.snapshot")
	if err := os.RemoveAll(dst); err != nil {
		return nil, err
	}
	if err := np.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	err := copyTree(src, dst)
	if cerr := np.Signal(syscall.SIGCONT); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot the JetStream store: %w", err)
	}
	return &StoreSnapshot{np: np, dir: dst}, nil
}

// Restore replaces the store with the snapshot. The process must not be running.
func (s *StoreSnapshot) Restore() error {
	if s.np.PID() != 0 {
		return fmt.Errorf("restore the JetStream store: nats-server (pid %d) is running", s.np.PID())
	}
	store := filepath.Join(s.np.Dir, "store")
	if err := os.RemoveAll(store); err != nil {
		return err
	}
	return os.Rename(s.dir, store)
}

// copyTree copies the regular files and folders under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

package devserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// NATSProcess is a nats-server binary run as a child process (JetStream, file store in Dir).
// Unlike StartNATS's server, it can be killed with any signal and restarted on its port and store.
type NATSProcess struct {
	Bin  string
	Port int
	Dir  string
	// Conf holds extra lines of the configuration file (server_name, cluster), for a node of a
	// cluster of processes.
	Conf string
	cmd  *exec.Cmd
	done chan struct{}
}

// NATSBin returns bin/nats-server in the module root (`make nats-server` builds it) when it
// exists; otherwise it builds nats-server, at the version go.mod pins, into dir.
func NATSBin(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "nats-server")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out := filepath.Join(dir, "nats-server")
	cmd := exec.Command("go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nats-server (or run `make nats-server`): %w\n%s", err, b)
	}
	return out, nil
}

// StartNATSProcess starts bin with JetStream on a free 127.0.0.1 port, storing in dir, and waits
// until it accepts connections. The caller owns it and must Stop it.
func StartNATSProcess(bin, dir string) (*NATSProcess, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var last error
	for try := 0; try < 3; try++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		n := &NATSProcess{Bin: bin, Port: port, Dir: dir}
		if last = n.Restart(); last == nil {
			return n, nil
		}
	}
	return nil, last
}

// URL is the server's client URL.
func (n *NATSProcess) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// PID is the server's process id (0 when it is not running).
func (n *NATSProcess) PID() int {
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Restart starts the server (again) on its port and store, and waits until it listens.
func (n *NATSProcess) Restart() error {
	if n.cmd != nil {
		return fmt.Errorf("nats-server (pid %d) is running", n.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(filepath.Join(n.Dir, "nats-server.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The same limits as StartNATS's in-process server.
	conf := filepath.Join(n.Dir, "nats-server.conf")
	text := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nmax_payload: %d\njetstream {\n  store_dir: %q\n  max_memory_store: %d\n  max_file_store: %d\n}\n",
		n.Port, 8<<20, filepath.Join(n.Dir, "store"), 256<<20, int64(4)<<30)
	text += n.Conf
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	var last error
	for try := 0; try < 50; try++ { // the port can linger a moment after a kill
		cmd := exec.Command(n.Bin, "-c", conf)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start nats-server: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		err := waitListening(cmd.Process.Pid, n.Port, done, 20*time.Second)
		if err == nil {
			n.cmd, n.done = cmd, done
			return nil
		}
		last = fmt.Errorf("nats-server: %w (see %s)", err, logf.Name())
		_ = cmd.Process.Kill()
		<-done
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// Signal sends sig to the server; for SIGKILL and SIGTERM it waits for the exit, after which
// Restart brings it back.
func (n *NATSProcess) Signal(sig syscall.Signal) error {
	if n.cmd == nil {
		return fmt.Errorf("nats-server is not running")
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal nats-server: %w", err)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		<-n.done
		n.cmd = nil
	}
	return nil
}

// Stop kills the server by pid and waits for it.
func (n *NATSProcess) Stop() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		<-n.done
		n.cmd = nil
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsChildEnv, when set ("PORT:STOREDIR"), makes this binary a NATS server with JetStream on
// 127.0.0.1:PORT instead of the load test: the NATS-outage scenario needs NATS as a process of
// its own, to SIGKILL it and start it again on the same port and store.
const natsChildEnv = "MAPAGG_LOADTEST_NATS_CHILD"

// maybeNATSChild runs the NATS server and never returns when this process is such a child.
func maybeNATSChild() {
	spec := os.Getenv(natsChildEnv)
	if spec == "" {
		return
	}
	port, dir, ok := strings.Cut(spec, ":")
	p, err := strconv.Atoi(port)
	if !ok || err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: %s=%q: want PORT:STOREDIR\n", natsChildEnv, spec)
		os.Exit(exitUsage)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: p, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20, JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 4 << 30})
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: nats child: %v\n", err)
		os.Exit(exitFailed)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		fmt.Fprintln(os.Stderr, "loadtest: nats child not ready within 20s")
		os.Exit(exitFailed)
	}
	s.WaitForShutdown() // until killed (the parent's death kills it too)
	os.Exit(exitOK)
}

// natsProc is a NATS server running as a child process of the load test.
type natsProc struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startNATSProc starts a NATS child process on a free port with its store in dir.
func startNATSProc(dir string) (*natsProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &natsProc{port: port, dir: dir}
	return p, p.start()
}

func (p *natsProc) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// start starts the process (again) and waits until it accepts connections.
func (p *natsProc) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", natsChildEnv, p.port, p.dir))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats process: %w", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if nc, err := nats.Connect(p.url(), nats.Timeout(time.Second)); err == nil {
			nc.Close()
			return nil
		}
		select {
		case <-p.done:
			return errors.New("nats process exited at start")
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.kill()
	return errors.New("nats process not ready within 30s")
}

// kill SIGKILLs the process and waits for it.
func (p *natsProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// waitCtx sleeps d unless ctx ends first.
func waitCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// freePorts returns n ports free on 127.0.0.1 at the time of the call.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Package devserver starts the real servers the system runs on, on free 127.0.0.1 ports.
//
// Azurite runs as two node processes (blob and queue) with disk persistence. NATS with JetStream
// runs in-process (StartNATS), as a nats-server process (StartNATSProcess, NATSBin builds it), or
// as a cluster of in-process nodes (StartNATSCluster). Nothing here is a mock. Child processes
// get a parent-death signal, and Stop kills them by pid.
package devserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// AccountName and AccountKey are Azurite's well-known development credentials.
const (
	AccountName = "devstoreaccount1"
	AccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteServer is a running Azurite: one blob process and one queue process.
type AzuriteServer struct {
	BlobPort, QueuePort int
	Dir                 string
	procs               []*exec.Cmd
	specs               []azuriteSpec // how each process was started, for Restart
	logPath             string
	exited              map[Service]chan struct{} // of restarted processes, whose Wait a goroutine owns
}

// Service names one Azurite process.
type Service int

// Azurite's processes.
const (
	Blob  Service = 0
	Queue Service = 1
)

func (s Service) String() string {
	if s == Blob {
		return "azurite-blob"
	}
	return "azurite-queue"
}

type azuriteSpec struct {
	bin       string
	args      []string
	port      int
	openFiles uint64 // its open-file limit; 0: as high as this process may set it
}

// PID is the process id of service s (0 when it is not running).
func (a *AzuriteServer) PID(s Service) int {
	if int(s) >= len(a.procs) || a.procs[s] == nil || a.procs[s].Process == nil {
		return 0
	}
	return a.procs[s].Process.Pid
}

// Kill sends sig to service s and, for SIGKILL and SIGTERM, waits for it to exit. Its data stays in Dir, so
// Restart brings it back on the same port with what it had saved (Azurite saves blob metadata
// every few seconds: a SIGKILL loses the most recent acknowledged writes).
func (a *AzuriteServer) Kill(s Service, sig syscall.Signal) error {
	if int(s) >= len(a.procs) || a.procs[s] == nil {
		return fmt.Errorf("%v is not running", s)
	}
	if err := a.procs[s].Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v: %w", s, err)
	}
	switch sig {
	case syscall.SIGKILL:
		a.wait(s)
		a.procs[s] = nil
	case syscall.SIGTERM: // a graceful stop saves the data; SIGKILL after 15 s
		t := time.AfterFunc(15*time.Second, func() { _ = a.procs[s].Process.Kill() })
		a.wait(s)
		t.Stop()
		a.procs[s] = nil
	}
	return nil
}

// Restart starts service s again (after Kill with SIGKILL) on the same port and data folder and
// waits until it accepts connections.
func (a *AzuriteServer) Restart(s Service) error {
	if int(s) >= len(a.specs) {
		return fmt.Errorf("%v: unknown service", s)
	}
	if a.procs[s] != nil {
		return fmt.Errorf("%v is running", s)
	}
	logf, err := os.OpenFile(a.logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	sp := a.specs[s]
	var last error
	for try := 0; try < 50; try++ { // the port can linger a moment after the kill
		cmd := exec.Command(sp.bin, sp.args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("restart %v: %w", s, err)
		}
		if err := setOpenFiles(cmd.Process.Pid, sp.openFiles); err != nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			return err
		}
		exited := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(exited) }()
		err := waitListening(cmd.Process.Pid, sp.port, exited, 30*time.Second)
		if err == nil {
			a.procs[s] = cmd
			if a.exited == nil {
				a.exited = map[Service]chan struct{}{}
			}
			a.exited[s] = exited
			return nil
		}
		last = fmt.Errorf("%v: %w", s, err)
		_ = cmd.Process.Kill()
		<-exited
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart %v: %w", s, last)
}

// ConnectionString is the Azure Storage connection string for this Azurite.
func (a *AzuriteServer) ConnectionString() string {
	return ConnectionString(a.BlobPort, a.QueuePort)
}

// ConnectionString builds an Azurite connection string for the given 127.0.0.1 ports.
func ConnectionString(blobPort, queuePort int) string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;"+
		"BlobEndpoint=http://127.0.0.1:%d/%s;QueueEndpoint=http://127.0.0.1:%d/%s;",
		AccountName, AccountKey, blobPort, AccountName, queuePort, AccountName)
}

// Stop kills both processes by pid and waits for them (a stopped one is continued first).
func (a *AzuriteServer) Stop() {
	for _, p := range a.procs {
		if p != nil && p.Process != nil {
			_ = p.Process.Kill()
		}
	}
	for i, p := range a.procs {
		if p != nil {
			a.wait(Service(i))
		}
	}
	a.procs = nil
}

func (a *AzuriteServer) wait(s Service) {
	if ch, ok := a.exited[s]; ok {
		<-ch
		delete(a.exited, s)
		return
	}
	_ = a.procs[s].Wait()
}

// RepoRoot returns the module root (the folder holding go.mod), found from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// AzuriteBin returns the path of an Azurite binary ("azurite-blob" or "azurite-queue"): the one
// in this repository's Azurite/node_modules, else the one on PATH (npm install -g azurite).
func AzuriteBin(name string) (string, error) {
	root, err := RepoRoot()
	if err == nil {
		p := filepath.Join(root, "Azurite", "node_modules", ".bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found at %s nor on PATH: install Azurite with `make azurite` here, or `npm install -g azurite`",
		name, filepath.Join(root, "Azurite", "node_modules", ".bin"))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// StartAzurite starts a fresh Azurite (blob + queue) in dir on free ports and waits until both
// listen (each its own socket: listens.go). The caller owns it and must Stop it.
//
// Each process's open-file limit is raised as far as this process may (setOpenFiles): Azurite
// leaks a file descriptor for every ranged read stopped early, and fails for good at its limit.
func StartAzurite(dir string) (*AzuriteServer, error) {
	return StartAzuriteWith(dir, AzuriteOptions{})
}

// AzuriteOptions are StartAzuriteWith's settings.
type AzuriteOptions struct {
	// OpenFiles is each process's open-file limit (soft and hard); 0 raises it as far as this
	// process may. A test sets it low to make Azurite run out of file descriptors on demand.
	OpenFiles uint64
}

// StartAzuriteWith is StartAzurite with options.
func StartAzuriteWith(dir string, o AzuriteOptions) (*AzuriteServer, error) {
	var lastErr error
	for try := 0; try < 3; try++ { // a free port can be taken between FreePort and listen
		a, err := startAzuriteOnce(dir, o)
		if err == nil {
			return a, nil
		}
		lastErr = err
		if strings.Contains(err.Error(), "not found at") {
			break
		}
	}
	return nil, lastErr
}

func startAzuriteOnce(dir string, o AzuriteOptions) (*AzuriteServer, error) {
	blobBin, err := AzuriteBin("azurite-blob")
	if err != nil {
		return nil, err
	}
	queueBin, err := AzuriteBin("azurite-queue")
	if err != nil {
		return nil, err
	}
	bp, err := freePort()
	if err != nil {
		return nil, err
	}
	qp, err := freePort()
	if err != nil {
		return nil, err
	}
	a := &AzuriteServer{BlobPort: bp, QueuePort: qp, Dir: dir, logPath: filepath.Join(dir, "azurite.log")}
	flags := []string{"--skipApiVersionCheck", "--loose", "--disableTelemetry"}
	specs := []azuriteSpec{
		{blobBin, append([]string{"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(bp), "--location", filepath.Join(dir, "blob")}, flags...), bp, o.OpenFiles},
		{queueBin, append([]string{"--queueHost", "127.0.0.1", "--queuePort", fmt.Sprint(qp), "--location", filepath.Join(dir, "queue")}, flags...), qp, o.OpenFiles},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "azurite.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	for _, s := range specs {
		if err := os.MkdirAll(s.args[5], 0o755); err != nil {
			return nil, err
		}
		cmd := exec.Command(s.bin, s.args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			a.Stop()
			return nil, fmt.Errorf("start %s: %w", filepath.Base(s.bin), err)
		}
		if err := setOpenFiles(cmd.Process.Pid, s.openFiles); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			a.Stop()
			return nil, err
		}
		exited := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(exited) }()
		if a.exited == nil {
			a.exited = map[Service]chan struct{}{}
		}
		a.exited[Service(len(a.procs))] = exited
		a.procs = append(a.procs, cmd)
		a.specs = append(a.specs, s)
	}
	// Node takes seconds to load Azurite, tens of them on a machine busy with other work. A dial
	// alone is not enough: another program may have taken the port meanwhile (listens.go).
	for i, s := range specs {
		if err := waitListening(a.procs[i].Process.Pid, s.port, a.exited[Service(i)], 90*time.Second); err != nil {
			a.Stop()
			log, _ := os.ReadFile(filepath.Join(dir, "azurite.log"))
			return nil, fmt.Errorf("%v did not start: %w\n%s", Service(i), err, log)
		}
	}
	return a, nil
}

// freePort is FreePort; a test replaces it to hand out a port another program holds.
var freePort = FreePort

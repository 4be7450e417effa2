package devserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"
)

// waitListening tells this process's listener from another process's on the same port.
func TestWaitListening_OwnSocketOnly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if err := waitListening(os.Getpid(), port, nil, time.Second); err != nil {
		t.Fatalf("own listener not seen: %v", err)
	}

	// A child that never listens: waitListening must not take this process's socket for its.
	cmd := exec.Command("sleep", "0.3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	err = waitListening(cmd.Process.Pid, port, exited, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exited before it listened") {
		t.Fatalf("a child that does not listen: err %v, want it to have exited before it listened", err)
	}

	cmd = exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	err = waitListening(cmd.Process.Pid, port, nil, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "another process listens there") {
		t.Fatalf("a child that does not listen, port held here: err %v, want a timeout naming another process", err)
	}
}

// The CI failure of 2026-11-30: a port handed to Azurite was taken by another HTTP server first,
// a dial reached that server, and every lease read got its HTTP 400. StartAzurite must notice
// that its process does not hold the port and start on others.
func TestStartAzurite_PortTakenByAnotherServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	handed := false
	freePort = func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if !handed {
			handed = true
			return taken, nil
		}
		return FreePort()
	}
	defer func() { freePort = FreePort }()

	a, err := StartAzurite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if a.BlobPort == taken || a.QueuePort == taken {
		t.Fatalf("Azurite reported up on port %d, which another server holds", taken)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/%s?comp=list", a.BlobPort, AccountName))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusBadRequest || resp.Header.Get("x-ms-request-id") == "" {
		t.Fatalf("blob port %d answered %d without a storage request id: not Azurite", a.BlobPort, resp.StatusCode)
	}
}

// StartAzurite raises each process's open-file limit (Azurite leaks descriptors); a set one is
// exactly that.
func TestStartAzurite_OpenFileLimit(t *testing.T) {
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  uint64
		want func(unix.Rlimit) bool
		what string
	}{
		{0, func(l unix.Rlimit) bool { return l.Cur == l.Max && l.Max >= own.Max }, "soft = hard ≥ this process's hard limit"},
		{300, func(l unix.Rlimit) bool { return l.Cur == 300 && l.Max == 300 }, "300"},
	} {
		a, err := StartAzuriteWith(t.TempDir(), AzuriteOptions{OpenFiles: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []Service{Blob, Queue} {
			var l unix.Rlimit
			if err := unix.Prlimit(a.PID(s), unix.RLIMIT_NOFILE, nil, &l); err != nil {
				t.Fatal(err)
			}
			if !tc.want(l) {
				t.Errorf("OpenFiles %d: %v limit %+v, want %s", tc.set, s, l, tc.what)
			}
		}
		a.Stop()
	}
}

// A port of an in-process NATS cluster taken between choosing it and binding it: the node never
// becomes ready, and the cluster starts again on fresh ports, with JetStream.
func TestStartNATSCluster_PortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	handed := false
	freePorts = func(n int) ([]int, error) {
		ps, err := FreePorts(n)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && !handed {
			handed, ps[0] = true, taken
		}
		return ps, err
	}
	natsReadyWithin = 2 * time.Second
	defer func() { freePorts, natsReadyWithin = FreePorts, 20*time.Second }()

	c, err := StartNATSCluster(t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if !handed {
		t.Fatal("the taken port was never handed out")
	}
	if strings.Contains(c.URLs(), fmt.Sprintf(":%d", taken)) {
		t.Fatalf("cluster %s on port %d, which another program holds", c.URLs(), taken)
	}
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream on the restarted cluster: %v", err)
	}
}

package devserver

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A port that was free a moment ago can be taken by another program before the server we start
// binds it; a dial then reaches that other program, and our server exits with "address in use"
// seconds later (Node loads Azurite slowly). So a server counts as up only when its own process
// holds the listening socket: the socket's inode, from /proc/net/tcp, is among /proc/<pid>/fd.

// waitListening waits until process pid listens on 127.0.0.1:port. It fails at once when exited
// closes (the process ended, most likely because the port was taken), and after within.
func waitListening(pid, port int, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		own, err := listensOn(pid, port)
		if err != nil {
			return err
		}
		if own {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pid %d exited before it listened on 127.0.0.1:%d (port taken by another program?)", pid, port)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			holder := "no process"
			if inodes, _ := listenInodes(port); len(inodes) > 0 {
				holder = "another process"
			}
			return fmt.Errorf("pid %d did not listen on 127.0.0.1:%d within %v (%s listens there)", pid, port, within, holder)
		}
	}
}

// listensOn reports whether process pid holds a listening TCP socket on port.
func listensOn(pid, port int) (bool, error) {
	inodes, err := listenInodes(port)
	if err != nil || len(inodes) == 0 {
		return false, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		if os.IsNotExist(err) {
			return false, nil // it exited; the caller sees that on its channel
		}
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(s, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listenInodes returns the inodes of the TCP sockets in LISTEN state on port (IPv4 and IPv6).
func listenInodes(port int) (map[string]bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A is TCP_LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
	}
	return inodes, nil
}

// setOpenFiles sets process pid's open-file limit, soft and hard, to n; n == 0 raises it as far
// as this process may: to the system's ceiling (/proc/sys/fs/nr_open) with the privilege to
// raise a hard limit, else to the current hard limit. Go's os/exec gives a child the soft limit
// this process started with, and Azurite (Node) leaks a descriptor for every ranged read stopped
// early, failing every request that opens a data file once at its limit. Soft and hard are set
// together, so it holds whether Node, which raises its soft limit to the hard one as it starts,
// runs before or after this.
func setOpenFiles(pid int, n uint64) error {
	if n == 0 {
		var cur unix.Rlimit
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &cur); err != nil {
			return fmt.Errorf("read the open-file limit of pid %d: %w", pid, err)
		}
		ceiling := cur.Max
		if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
			if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v > ceiling {
				ceiling = v
			}
		}
		if unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: ceiling, Max: ceiling}, nil) == nil {
			return nil
		}
		n = cur.Max // no privilege to raise the hard limit: the soft one up to it
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		return fmt.Errorf("set the open-file limit of pid %d to %d: %w", pid, n, err)
	}
	return nil
}

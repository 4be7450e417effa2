package sim

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/node"
)

// Host runs members in this process.
type Host struct {
	cfg  MemberConfig
	node *node.Node

	mu      sync.Mutex
	members map[string]*member
	gone    storecount.Counts // requests of members since crashed or stopped
}

// NewHost returns a host of members configured by cfg, with the built-in job types.
func NewHost(cfg MemberConfig) (*Host, error) {
	if cfg.Keys == nil {
		return nil, fmt.Errorf("sim: a host needs the cluster key")
	}
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, 15*time.Second)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 2)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	n, err := node.New(node.Options{Registry: builtin.Registry()})
	if err != nil {
		return nil, err
	}
	return &Host{cfg: cfg, node: n, members: map[string]*member{}, gone: storecount.Counts{}}, nil
}

// Start starts member id (again, if it crashed or stopped: the old one is waited for first).
func (h *Host) Start(id string) error {
	h.mu.Lock()
	old := h.members[id]
	h.mu.Unlock()
	if old != nil {
		select {
		case <-old.done:
		default:
			if !old.storage.cut.Load() {
				return fmt.Errorf("sim: member %s is running", id)
			}
			if !old.wait(30 * time.Second) {
				return fmt.Errorf("sim: crashed member %s did not stop within 30s", id)
			}
		}
	}
	m, err := startMember(h.node, h.cfg, id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if old != nil {
		h.gone.Add(old.counting.Counts())
	}
	h.members[id] = m
	h.mu.Unlock()
	return nil
}

// Crash crashes member id (see the package doc) and returns when.
func (h *Host) Crash(id string) (time.Time, error) {
	h.mu.Lock()
	m := h.members[id]
	h.mu.Unlock()
	if m == nil {
		return time.Time{}, fmt.Errorf("sim: no member %s", id)
	}
	return m.crash(), nil
}

// Counts are the storage requests of every member this host ran.
func (h *Host) Counts() storecount.Counts {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := storecount.Counts{}
	out.Add(h.gone)
	for _, m := range h.members {
		out.Add(m.counting.Counts())
	}
	return out
}

// Close stops every member gracefully, side by side.
func (h *Host) Close() {
	h.mu.Lock()
	ms := make([]*member, 0, len(h.members))
	for _, m := range h.members {
		ms = append(ms, m)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); m.stop() }()
	}
	wg.Wait()
}

// Counted is one kind of request and how many were sent, as a host reports them.
type Counted struct {
	storecount.Request
	N int64 `json:"n"`
}

// Serve answers commands, one a line, until in ends or says "quit"; then it closes the host.
// Every command gets one line back, "ok ..." or "err ...":
//
//	start ID...   start members (restart crashed ones)   → ok
//	crash ID      crash a member                           → ok UNIX-NANOSECONDS
//	counts        storage requests of every member so far  → ok JSON [{"Service":..,"n":..},..]
//	quit          stop every member gracefully             → ok
func (h *Host) Serve(in io.Reader, out io.Writer) error {
	defer h.Close()
	sc := bufio.NewScanner(in)
	reply := func(format string, args ...any) error {
		_, err := fmt.Fprintf(out, format+"\n", args...)
		return err
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "start":
			var errs []string
			for _, id := range f[1:] {
				if e := h.Start(id); e != nil {
					errs = append(errs, e.Error())
				}
			}
			if len(errs) > 0 {
				err = reply("err %s", strings.Join(errs, "; "))
			} else {
				err = reply("ok")
			}
		case "crash":
			if len(f) != 2 {
				err = reply("err crash takes one member id")
				break
			}
			at, e := h.Crash(f[1])
			if e != nil {
				err = reply("err %v", e)
			} else {
				err = reply("ok %d", at.UnixNano())
			}
		case "counts":
			var list []Counted
			for r, n := range h.Counts() {
				list = append(list, Counted{r, n})
			}
			b, _ := json.Marshal(list)
			err = reply("ok %s", b)
		case "quit":
			return reply("ok")
		default:
			err = reply("err unknown command %q; known: start, crash, counts, quit", f[0])
		}
		if err != nil {
			return err
		}
	}
	return sc.Err()
}

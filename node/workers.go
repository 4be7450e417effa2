package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mapagg/mapagg/internal/membership"
)

type workersFlags struct {
	common
	listen time.Duration
	json   bool
	fs     *flagSet
}

func (n *Node) newWorkersFlags() *workersFlags {
	f := &workersFlags{fs: n.newFlagSet("workers")}
	fs := f.fs
	f.common.register(fs)
	fs.DurationVar(&f.listen, "listen", 2500*time.Millisecond, "how long to listen for announcements (workers announce every second)")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	return f
}

// workersCmd lists the workers that announce themselves on NATS, and who leads.
func (n *Node) workersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newWorkersFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
	}
	if f.listen < membership.DefaultInterval || f.listen > time.Minute {
		return usageErr("--listen %v: must be 1s to 1m (workers announce every %v)", f.listen, membership.DefaultInterval)
	}
	if err := f.resolveNATS(f.natsURL); err != nil {
		return usageErr("%v", err)
	}
	b, err := f.connectNATS(n.opts.Name + "-cli")
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w (check --nats-url / NATS_URL)", f.natsURL, err)
	}
	defer b.Close()
	w, err := membership.Watch(b.Conn(), f.names().Members(), 0, nil)
	if err != nil {
		return fmt.Errorf("watch membership: %w", err)
	}
	defer w.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.listen):
	}
	live := w.Live()
	leader, hasLeader := membership.Leader(live)
	if f.json {
		out := struct {
			Leader  *membership.Member  `json:"leader"`
			Workers []membership.Member `json:"workers"`
		}{Workers: live}
		if hasLeader {
			out.Leader = &leader
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(live) == 0 {
		fmt.Fprintf(stdout, "no workers announced themselves within %v (prefix %q on %s)\n", f.listen, f.streamPrefix, f.natsURL)
		return nil
	}
	if hasLeader {
		fmt.Fprintf(stdout, "leader: %s (epoch %d)\n\n", leader.ID, leader.Epoch)
	} else {
		fmt.Fprintf(stdout, "leader: none announced\n\n")
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tHOST\tPID\tHTTP\tIN FLIGHT\tCONCURRENCY\tUP\tVERSION\tJOB TYPES\tPROBLEMS")
	for _, m := range live {
		role := "follower"
		if m.Leader {
			role = fmt.Sprintf("leader (epoch %d)", m.Epoch)
		}
		problems := "-"
		if len(m.Problems) > 0 {
			problems = "NOT READY: " + oneLine(strings.Join(m.Problems, "; "), 160)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.ID, role, cmp.Or(m.Host, "-"), m.PID, cmp.Or(m.HTTPAddr, "off"),
			m.InFlight, m.Concurrency, time.Since(m.StartedAt).Round(time.Second), m.Version, strings.Join(m.JobTypes, ","), problems)
	}
	return tw.Flush()
}

type healthFlags struct {
	httpAddr string
	timeout  time.Duration
	fs       *flagSet
}

func (n *Node) newHealthFlags() *healthFlags {
	f := &healthFlags{fs: n.newFlagSet("health")}
	f.fs.StringVar(&f.httpAddr, "http-addr", DefaultHTTPAddr, "the worker's HTTP address (as given to worker run)")
	f.fs.DurationVar(&f.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return f
}

// healthCmd asks the local worker's /readyz and exits 0 only when it answers 200: the container
// health check of images without curl (`worker health`).
func (n *Node) healthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := n.newHealthFlags()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
	}
	host, port, err := net.SplitHostPort(f.httpAddr)
	if err != nil || port == "0" || f.httpAddr == "off" {
		return usageErr("--http-addr %q: give the worker's HTTP address with its port, e.g. :8080 or 127.0.0.1:9090", f.httpAddr)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/readyz"
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(fmt.Sprintf("not ready (%s): %s", resp.Status, body)))
	}
	fmt.Fprintf(stdout, "ready: %s", body)
	return nil
}

package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// DaskResult is what scripts/dask_wordcount.py reports.
type DaskResult struct {
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
	Files   int     `json:"files"`
	Workers int     `json:"workers"`
	Python  string  `json:"python"` // the interpreter that ran it
}

// DaskInstall is what to run where no Python on the machine imports Dask.
const DaskInstall = "apt-get update && apt-get install -y python3-dask python3-distributed (or set DASK_PYTHON to a Python that has dask and distributed)"

// DaskPython returns the first interpreter that imports dask.bag and dask.distributed, trying
// $DASK_PYTHON, the system's Python (where apt installs Dask), then python3 on PATH (which may be
// a pyenv shim that does not see apt's packages). The error lists every one tried.
func DaskPython(ctx context.Context) (string, error) {
	var tried []string
	for _, py := range daskCandidates() {
		out, err := exec.CommandContext(ctx, py, "-c", "import dask.bag, dask.distributed").CombinedOutput()
		if err == nil {
			return py, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s", py, clip(strings.TrimSpace(lastLineOr(out, err)), 120)))
	}
	return "", fmt.Errorf("dask is not installed: no Python here imports dask.distributed (tried %s); install it: %s",
		strings.Join(tried, "; "), DaskInstall)
}

func daskCandidates() []string {
	var c []string
	if py := os.Getenv("DASK_PYTHON"); py != "" {
		c = append(c, py)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		c = append(c, "/usr/bin/python3")
	}
	if p, err := exec.LookPath("python3"); err == nil && p != "/usr/bin/python3" {
		c = append(c, p)
	}
	if len(c) == 0 {
		c = append(c, "python3")
	}
	return c
}

func lastLineOr(out []byte, err error) string {
	if l := lastLine(out); len(bytes.TrimSpace(l)) > 0 {
		return string(l)
	}
	return err.Error()
}

// DaskCommand is the command line RunDask runs with the interpreter py.
func DaskCommand(py, script, src, out string, workers int) []string {
	return []string{py, script, "--workers", strconv.Itoa(workers), src, out}
}

// RunDask runs the Dask word count over the corpus's local copy, writing every count under out
// (part files), and returns its timing and the interpreter it used. It fails with what to
// install when no Python here has Dask.
func RunDask(ctx context.Context, script string, wc *WordCorpus, out string, workers int) (*DaskResult, error) {
	if wc.Dir == "" {
		return nil, errors.New("dask: the corpus has no local copy")
	}
	py, err := DaskPython(ctx)
	if err != nil {
		return nil, err
	}
	args := DaskCommand(py, script, wc.Dir, out, workers)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %v: %s", args, err, clip(stderr.String(), 600))
	}
	var res DaskResult
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(stdout.Bytes())), &res); err != nil {
		return nil, fmt.Errorf("dask output %q: %v", clip(stdout.String(), 200), err)
	}
	res.Python = py
	return &res, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// clip cuts s to n bytes, saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

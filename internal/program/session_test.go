package program

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// pyProgram writes a Python program of the package (python/) and registers it.
func pyProgram(t *testing.T, body string, cfg Config) *Program {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	// The interpreter itself, not a shim of a version manager (a start costs more through it).
	if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		py = string(bytes.TrimSpace(out))
	}
	root, _ := filepath.Abs("../../python")
	t.Setenv("PYTHONPATH", root)
	script := filepath.Join(t.TempDir(), "prog.py")
	if err := os.WriteFile(script, []byte("import os, sys, time\nimport mapagg\n"+body+"\nif __name__ == '__main__':\n    mapagg.run()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newProgram(t, py+" "+script, cfg)
	t.Cleanup(p.Close)
	knowJobs(p)
	return p
}

// knowJobs gives the program the parameters of the tests' jobs ({}), as read from their specs.
func knowJobs(p *Program) {
	p.pc.mu.Lock()
	defer p.pc.mu.Unlock()
	p.pc.byID = map[string]json.RawMessage{}
	for _, id := range []string{"j", "job-a", "job-b", "job-env"} {
		p.pc.byID[id] = json.RawMessage("{}")
	}
}

// jobsEnv is a jobstest.Env with a jobs container, where a job's end is seen.
type jobsEnv struct{ *jobstest.Env }

func (jobsEnv) JobsContainer() string { return "jobs" }

func shards(t *testing.T, p *Program, env jobs.Env) [][]byte {
	t.Helper()
	s, err := p.Split(context.Background(), env, json.RawMessage(`{"container":"input","shard_bytes":7}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mapJob(t *testing.T, p *Program, env jobs.Env, job string) ([][2]string, error) {
	t.Helper()
	var pairs [][2]string
	for i, s := range shards(t, p, env) {
		err := p.Map(context.Background(), env, jobs.Task{JobID: job, Index: i, Attempt: 1, Shard: s}, func(k, v []byte) error {
			pairs = append(pairs, [2]string{string(k), string(v)})
			return nil
		})
		if err != nil {
			return pairs, err
		}
	}
	return pairs, nil
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// waitGone waits until the process pid has exited (it is a child of another process: its
// zombie is reaped by the worker's Wait).
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after %v", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const wordcountPy = `
from collections import Counter

def map_blocks(blocks):
    c = Counter()
    for text in blocks:
        c.update(text.split())
    c["pid " + str(os.getpid())] += 1
    return c

def combiner(word, counts):
    return sum(counts)

def reducer(word, counts):
    if word.startswith("pid "):
        return None
    return sum(counts)
`

// A job's map tasks and its reduce run in one process (per worker), which serves no other job
// and ends when the job has ended.
func TestSession_OneProcessServesAJob(t *testing.T) {
	p := pyProgram(t, wordcountPy, Config{IdleTimeout: time.Minute, JobEndPoll: 20 * time.Millisecond})
	if !p.Capabilities().Session {
		t.Fatal("the Python package declares sessions; Capabilities says it has none")
	}
	env := jobsEnv{jobstest.NewEnv()}
	env.Put("input", "a.txt", []byte("the cat\nthe dog the end\nno\n"))
	env.Put("input", "b.txt", []byte("cat cat dog\n"))
	p.SetEnv(env)
	pairs, err := mapJob(t, p, env, "job-a")
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]bool{}
	var data [][2]string
	for _, kv := range pairs {
		if strings.HasPrefix(kv[0], "pid ") {
			pids[kv[0]] = true
		} else {
			data = append(data, kv)
		}
	}
	if n := len(shards(t, p, env)); n < 3 || len(pids) != 1 {
		t.Fatalf("%d map tasks ran in %d processes (%v), want one", n, len(pids), pids)
	}
	s, err := p.ReducePartition(context.Background(), jobs.ReduceTask{JobID: "job-a"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := reduceIn(s, append(data, [2]string{"pid 1", "1"}))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{`"cat"`, "3"}, {`"dog"`, "2"}, {`"end"`, "1"}, {`"no"`, "1"}, {`"the"`, "3"}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("output %v, want %v", out, want)
	}
	if got := p.SessionsStarted(); got != 1 {
		t.Fatalf("%d session processes for one job's tasks, want 1", got)
	}
	// Another job gets a process of its own.
	other, err := mapJob(t, p, env, "job-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range other {
		if strings.HasPrefix(kv[0], "pid ") && pids[kv[0]] {
			t.Fatalf("job-b's map ran in job-a's process %s", kv[0])
		}
	}
	if got := p.SessionsStarted(); got != 2 {
		t.Fatalf("%d session processes for two jobs, want 2", got)
	}
	// job-a ends (its result is stored): its process ends; job-b's does not.
	var pidA, pidB int
	for k := range pids {
		pidA, _ = strconv.Atoi(strings.TrimPrefix(k, "pid "))
	}
	for _, kv := range other {
		if strings.HasPrefix(kv[0], "pid ") {
			pidB, _ = strconv.Atoi(strings.TrimPrefix(kv[0], "pid "))
		}
	}
	env.Put("jobs", protocol.ResultBlob("job-a"), []byte("{}"))
	waitGone(t, pidA, 10*time.Second)
	time.Sleep(100 * time.Millisecond)
	if !alive(pidB) {
		t.Fatal("job-b's process ended when job-a did")
	}
	p.Close()
	waitGone(t, pidB, 10*time.Second)
}

func reduceIn(s jobs.ReduceSession, pairs [][2]string) ([][2]string, error) {
	slices.SortStableFunc(pairs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	var out [][2]string
	emit := func(k, v []byte) error { out = append(out, [2]string{string(k), string(v)}); return nil }
	for i := 0; i < len(pairs); {
		j := i
		for j < len(pairs) && pairs[j][0] == pairs[i][0] {
			j++
		}
		vals := func(yield func([]byte) bool) {
			for _, kv := range pairs[i:j] {
				if !yield([]byte(kv[1])) {
					return
				}
			}
		}
		if err := s.Reduce(context.Background(), []byte(pairs[i][0]), vals, emit); err != nil {
			_ = s.Close(context.Background(), nil)
			return out, err
		}
		i = j
	}
	return out, s.Close(context.Background(), emit)
}

// A mapper that raises fails its task naming the exception; the job's next task gets a new
// process and runs.
func TestSession_RaiseFailsTheTaskOnly(t *testing.T) {
	p := pyProgram(t, `
def mapper(line):
    if "poison" in line:
        raise ValueError("poison record seen")
    yield line, 1

def reducer(k, vs):
    return sum(vs)
`, Config{})
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("fine\n"))
	env.Put("input", "b.txt", []byte("poison\n"))
	env.Put("input", "c.txt", []byte("also fine\n"))
	sh := shards(t, p, env)
	run := func(i int) error {
		return p.Map(context.Background(), env, jobs.Task{JobID: "j", Index: i, Attempt: 1, Shard: sh[i]}, func(k, v []byte) error { return nil })
	}
	if err := run(0); err != nil {
		t.Fatal(err)
	}
	err := run(1)
	if err == nil || !strings.Contains(err.Error(), "ValueError: poison record seen") || !strings.Contains(err.Error(), "program prog (map of shard 1) exited with status 1") {
		t.Fatalf("error %v, want the task, the exit status and the exception", err)
	}
	if strings.Contains(err.Error(), "session") {
		t.Errorf("error %q speaks of the session, not of the task", err)
	}
	if err := run(2); err != nil {
		t.Fatalf("the task after a failed one: %v", err)
	}
	if got := p.SessionsStarted(); got != 2 {
		t.Fatalf("%d processes started, want 2 (a new one after the failure)", got)
	}
}

// A session process's environment holds no secret; its working directory goes with it; it
// ends after the idle timeout.
func TestSession_EnvironmentAndIdleEnd(t *testing.T) {
	worker := []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + mustAbs(t, "../../python"),
		"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=http;AccountKey=c2VjcmV0", "CLUSTER_KEY_FILE=/etc/key",
		"API_TOKEN=t0k3n", "MY_SETTING=ok"}
	lookup := func(k string) (string, bool) {
		for _, kv := range worker {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
	p := pyProgram(t, `
def map_chunk(text):
    env = open("/proc/self/environ", "rb").read().split(b"\0")
    out = [("env", e.decode()) for e in env if e]
    out.append(("dir", os.getcwd()))
    out.append(("pid", os.getpid()))
    out.append(("task", "%s %s %s" % (os.environ["MAPAGG_ROLE"], os.environ["MAPAGG_SHARD"], os.environ["MAPAGG_ATTEMPT"])))
    return out

def reducer(k, vs):
    return None
`, Config{LookupEnv: lookup, Environ: worker, Env: []string{"MY_SETTING"}, IdleTimeout: 300 * time.Millisecond, JobEndPoll: 50 * time.Millisecond})
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("x\n"))
	pairs, err := mapJob(t, p, env, "job-env")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var dir, task string
	pid := 0
	for _, kv := range pairs {
		var text string
		if json.Unmarshal([]byte(kv[1]), &text) == nil {
			kv[1] = text // the values are JSON
		}
		switch kv[0] {
		case "env":
			got = append(got, kv[1])
		case "dir":
			dir = kv[1]
		case "pid":
			pid, _ = strconv.Atoi(kv[1])
		case "task":
			task = kv[1]
		}
	}
	all := strings.Join(got, "\n")
	for _, secret := range []string{"AccountKey", "CLUSTER_KEY", "API_TOKEN", "t0k3n", "AZURE_"} {
		if strings.Contains(all, secret) {
			t.Errorf("the session process's environment holds %s:\n%s", secret, all)
		}
	}
	for _, want := range []string{"MAPAGG_ROLE=session", "MAPAGG_JOB_ID=job-env", "MAPAGG_PARAMS={}", "MY_SETTING=ok"} {
		if !slices.Contains(got, want) {
			t.Errorf("the session process's environment lacks %s:\n%s", want, all)
		}
	}
	if task != "map 0 1" {
		t.Errorf("the task's variables in the program: %q, want \"map 0 1\"", task)
	}
	if pid == 0 || dir == "" {
		t.Fatalf("no pid or directory reported: %v", pairs)
	}
	waitGone(t, pid, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("working directory %s still exists after the session ended", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A session program that breaks the framing fails the task, with what it did wrong.
func TestSession_FramingFaults(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("one\ntwo\n"))
	// Each program reads the task line and the frames, then misbehaves.
	const read = `
def frames():
    data = b""
    while True:
        n = int(sys.stdin.buffer.readline())
        if n == 0:
            return data
        data += sys.stdin.buffer.read(n)
`
	cases := []struct {
		name, body, want string
		cfg              Config
	}{
		{"wrong end line", `sys.stdin.buffer.readline(); frames(); print("k\t1"); print("mapagg:end 7"); sys.stdout.flush(); time.sleep(30)`,
			`malformed line 2 of its output: no TAB between key and value: "mapagg:end 7"`, Config{}},
		{"exit 0 mid-task", `sys.stdin.buffer.readline(); frames(); print("k\t1")`,
			"exited with status 0 in the middle of a task", Config{}},
		{"end before its input", `sys.stdin.buffer.readline(); print("mapagg:end 1"); sys.stdout.flush(); time.sleep(60)`,
			"before it read all of the task's input", Config{}},
		{"time limit", `sys.stdin.buffer.readline(); frames(); time.sleep(30)`,
			"exceeded its time limit of 300ms", Config{Timeout: 300 * time.Millisecond}},
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "prog.py")
			body := "import os, sys, time\n" + read + "if os.environ['MAPAGG_ROLE'] == 'describe':\n    print('{\"session\": true}')\n    sys.exit(0)\n" + c.body + "\n"
			if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := c.cfg
			p := newProgram(t, py+" "+script, cfg)
			defer p.Close()
			knowJobs(p)
			// "end before its input" needs more input than a pipe holds.
			in := jobstest.NewEnv()
			in.Put("input", "a.txt", bytes.Repeat([]byte("a line of input\n"), 1<<16))
			e, n := jobs.Env(env), int64(8)
			if c.name == "end before its input" {
				e, n = in, 16<<16
			}
			shard, _ := json.Marshal(jobs.BlobRange{Container: "input", Blob: "a.txt", Offset: 0, Length: n})
			start := time.Now()
			err := p.Map(context.Background(), e, jobs.Task{JobID: "j", Index: 0, Attempt: 1, Shard: shard}, func(k, v []byte) error { return nil })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "program prog (map of shard 0)") {
				t.Errorf("error %q does not name the program and the task", err)
			}
			if d := time.Since(start); d > 25*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// FuzzSessionOutput: whatever a session program writes, the worker reads records up to the
// end line of the task and no further, never takes the end line for a record, and bounds a line.
func FuzzSessionOutput(f *testing.F) {
	f.Add([]byte("a\t1\nb\t2\nmapagg:end 1\nc\t3\nmapagg:end 2\n"), uint8(1))
	f.Add([]byte("mapagg:end 1"), uint8(1))
	f.Add([]byte("x\tmapagg:end 1\nmapagg:end 10\nmapagg:end 1\r\n"), uint8(1))
	f.Add([]byte("\\t\t\\n\nno tab\n"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, seq uint8) {
		lr := newLineReader(bytes.NewReader(data), 1<<20)
		var ps parser
		end := []byte(endPrefix + strconv.Itoa(int(seq)))
		for task := int(seq); task < int(seq)+3; task++ {
			lr.startTask(task)
			end = []byte(endPrefix + strconv.Itoa(task))
			for {
				line, err := lr.next()
				if err != nil {
					if lr.ended && err != io.EOF {
						t.Fatalf("ended with %v", err)
					}
					break
				}
				if bytes.Equal(line, end) {
					t.Fatalf("the end line %q read as a line", line)
				}
				if k, v, err := ps.parse(line); err == nil {
					if !bytes.Contains(line, []byte{'\t'}) || len(k) > jobs.MaxKeyBytes || len(v) > jobs.MaxValueBytes {
						t.Fatalf("line %q parsed to %q %q", line, k, v)
					}
				}
			}
			if !lr.ended {
				break
			}
		}
	})
}

// The frames a task's input is sent in carry its bytes whole, in order, each at most
// frameBytes, after the task's line, and end with a zero length.
func TestAheadFrames(t *testing.T) {
	var out bytes.Buffer
	a := newAhead(&out, true, frameBytes, []byte("mapagg:task {}\n"))
	var want []byte
	for i := range 3000 {
		line := bytes.Repeat([]byte{byte('a' + i%26)}, i)
		want = append(append(want, line...), '\n')
		if _, err := a.Write(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.end(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&out)
	if l, _ := br.ReadString('\n'); l != "mapagg:task {}\n" {
		t.Fatalf("first line %q", l)
	}
	var got []byte
	frames := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSuffix(l, "\n"))
		if err != nil || n < 0 || n > frameBytes {
			t.Fatalf("frame length %q", l)
		}
		if n == 0 {
			break
		}
		frames++
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, want) || br.Buffered() != 0 {
		t.Fatalf("%d bytes in %d frames, want %d", len(got), frames, len(want))
	}
	if frames != (len(want)+frameBytes-1)/frameBytes {
		t.Fatalf("%d frames for %d bytes", frames, len(want))
	}
}

// A write error of the goroutine reaches the feed, which stops.
func TestAheadWriteError(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	a := newAhead(w, false, 1024, nil)
	defer w.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := a.Write(make([]byte, 4096)); err != nil {
			if !strings.Contains(err.Error(), "broken pipe") {
				t.Fatalf("error %v, want a broken pipe", err)
			}
			a.close()
			return
		}
	}
	t.Fatal("writes to a closed pipe go on failing silently")
}

// Past MaxIdle idle session processes (here one), the one idle longest ends.
func TestSession_MaxIdle(t *testing.T) {
	p := pyProgram(t, `
def map_chunk(text):
    return [("pid", os.getpid())]

def reducer(k, vs):
    return None
`, Config{MaxIdle: 1, IdleTimeout: time.Minute})
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("x\n"))
	var pids []int
	for _, job := range []string{"j", "job-a", "job-b"} {
		pairs, err := mapJob(t, p, env, job)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(pairs[0][1])
		pids = append(pids, pid)
	}
	waitGone(t, pids[0], 10*time.Second)
	waitGone(t, pids[1], 10*time.Second)
	if !alive(pids[2]) {
		t.Fatal("the last job's idle process ended too")
	}
}

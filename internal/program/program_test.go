package program

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func newProgram(t *testing.T, command string, cfg Config) *Program {
	t.Helper()
	spec, err := ParseSpec("prog=" + command)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	p, err := New(context.Background(), spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mapAll runs the map of every shard of container "input" and returns the emitted pairs.
func mapAll(t *testing.T, p *Program, env *jobstest.Env) ([][2]string, error) {
	t.Helper()
	shards, err := p.Split(context.Background(), env, json.RawMessage(`{"container":"input","shard_bytes":7}`))
	if err != nil {
		t.Fatal(err)
	}
	var pairs [][2]string
	for i, s := range shards {
		err := p.Map(context.Background(), env, jobs.Task{Index: i, Attempt: 1, Shard: s}, func(k, v []byte) error {
			pairs = append(pairs, [2]string{string(k), string(v)})
			return nil
		})
		if err != nil {
			return pairs, err
		}
	}
	return pairs, nil
}

// reduceAll groups pairs by key and reduces them in one session, as the shuffle does.
func reduceAll(t *testing.T, p *Program, pairs [][2]string) ([][2]string, error) {
	t.Helper()
	groups := map[string][]string{}
	for _, kv := range pairs {
		groups[kv[0]] = append(groups[kv[0]], kv[1])
	}
	s, err := p.ReducePartition(context.Background(), jobs.ReduceTask{Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	emit := func(k, v []byte) error { out = append(out, [2]string{string(k), string(v)}); return nil }
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		vals := func(yield func([]byte) bool) {
			for _, v := range groups[k] {
				if !yield([]byte(v)) {
					return
				}
			}
		}
		if err := s.Reduce(context.Background(), []byte(k), vals, emit); err != nil {
			_ = s.Close(context.Background(), nil)
			return out, err
		}
	}
	return out, s.Close(context.Background(), emit)
}

// The word count of examples/programs (awk, with a combine role) runs as a program here.
func TestProgram_WordCount(t *testing.T) {
	p := newProgram(t, "../../examples/programs/wordcount.sh", Config{})
	if !p.Capabilities().Combine {
		t.Fatal("wordcount.sh declares a combine role; Capabilities says it has none")
	}
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("the cat\nthe dog the end\nno\n"))
	env.Put("input", "b.txt", []byte("cat cat dog\n"))
	pairs, err := mapAll(t, p, env)
	if err != nil {
		t.Fatal(err)
	}
	out, err := reduceAll(t, p, pairs)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{`"cat"`, "3"}, {`"dog"`, "2"}, {`"end"`, "1"}, {`"no"`, "1"}, {`"the"`, "3"}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("output %v, want %v", out, want)
	}
}

func TestProgram_ReduceManyKeysThroughPipes(t *testing.T) {
	// cat echoes its input: the reduce pushes more than a pipe holds both ways at once.
	p := newProgram(t, "cat", Config{})
	var pairs [][2]string
	for i := range 50_000 {
		pairs = append(pairs, [2]string{fmt.Sprintf("k%06d", i), strings.Repeat("v", i%50) + "\t\\\n"})
	}
	out, err := reduceAll(t, p, pairs)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(pairs) {
		t.Fatalf("%d records out, want %d", len(out), len(pairs))
	}
	for i := range out {
		k, _ := json.Marshal(pairs[i][0])
		v, _ := json.Marshal(pairs[i][1])
		if out[i][0] != string(k) || out[i][1] != string(v) {
			t.Fatalf("record %d: %q, want %q %q", i, out[i], k, v)
		}
	}
}

func TestProgram_Failures(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("one\ntwo\n"))
	cases := []struct {
		name, script, want string
		cfg                Config
	}{
		{"exit status", `echo starting >&2; echo "Traceback: ValueError: bad record" >&2; exit 3`, "exited with status 3", Config{}},
		{"stderr in the error", `echo "ValueError: bad record two" >&2; exit 1`, "ValueError: bad record two", Config{}},
		{"malformed line", `cat >/dev/null; echo "no tab here"`, "malformed line 1 of its output: no TAB between key and value", Config{}},
		{"time limit", `exec sleep 30`, "exceeded its time limit of 300ms", Config{Timeout: 300 * time.Millisecond}},
		{"output limit", `yes "k	v"`, "wrote more than its output limit of 4096 bytes", Config{MaxOutputBytes: 4096}},
		{"killed", `kill -9 $$`, "was killed by signal 9", Config{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "prog.sh")
			body := "#!/bin/sh\n[ \"$MAPAGG_ROLE\" = describe ] && exit 0\n" + c.script + "\n"
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			p := newProgram(t, script, c.cfg)
			start := time.Now()
			_, err := mapAll(t, p, env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "program prog (map of shard 0)") {
				t.Errorf("error %q does not name the program and the task", err)
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}
}

func TestProgram_StderrIsBounded(t *testing.T) {
	p := newProgram(t, "sh -c 'if [ $MAPAGG_ROLE = describe ]; then exit 0; fi; head -c 5000000 /dev/zero | tr \"\\0\" x >&2; echo >&2; echo last words >&2; exit 1'", Config{StderrBytes: 1024})
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("x\n"))
	_, err := mapAll(t, p, env)
	if err == nil || !strings.Contains(err.Error(), "last words") || len(err.Error()) > 2048 {
		t.Fatalf("error of %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}

func TestProgram_EnvironmentHasNoSecrets(t *testing.T) {
	worker := []string{"PATH=" + os.Getenv("PATH"), "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=http;AccountKey=c2VjcmV0", "CLUSTER_KEY_FILE=/etc/key",
		"API_TOKEN_FILE=/etc/token", "NATS_PASSWORD_FILE=/p", "MY_SETTING=ok", "LC_ALL=C"}
	lookup := func(k string) (string, bool) {
		for _, kv := range worker {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
	p := newProgram(t, "sh -c 'if [ $MAPAGG_ROLE = map ]; then cat /proc/$$/environ | tr \"\\0\" \"\\n\" | sed \"s/^/env\\t/\"; pwd | sed \"s/^/dir\\t/\"; fi'",
		Config{LookupEnv: lookup, Environ: worker, Env: []string{"MY_SETTING"}})
	env := jobstest.NewEnv()
	env.Put("input", "a.txt", []byte("x\n"))
	pairs, err := mapAll(t, p, env)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var dir string
	for _, kv := range pairs {
		if kv[0] == "dir" {
			dir = kv[1]
		} else {
			got = append(got, kv[1])
		}
	}
	all := strings.Join(got, "\n")
	for _, secret := range []string{"AccountKey", "CLUSTER_KEY", "API_TOKEN", "NATS_PASSWORD", "AZURE_"} {
		if strings.Contains(all, secret) {
			t.Errorf("the program's environment holds %s:\n%s", secret, all)
		}
	}
	for _, want := range []string{"MAPAGG_ROLE=map", "MAPAGG_SHARD=0", "MAPAGG_PARAMS={}", "MY_SETTING=ok", "LC_ALL=C"} {
		if !slices.Contains(got, want) {
			t.Errorf("the program's environment lacks %s:\n%s", want, all)
		}
	}
	if dir == "" {
		t.Fatal("no working directory reported")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("working directory %s still exists after the task (stat: %v)", dir, err)
	}
}

func TestNew_RefusesMissingAndNotExecutable(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "job.py")
	if err := os.WriteFile(plain, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"no-such-program-here":   `"no-such-program-here" is not in PATH`,
		plain:                    "is not executable",
		"/nonexistent/run.sh":    "does not exist",
		"sh -c 'exit 4'":         "exited with status 4: a program must exit 0 when MAPAGG_ROLE=describe",
		"sh -c 'echo {bad json'": "describe output is not a JSON object",
	}
	for cmd, want := range cases {
		spec, err := ParseSpec("x=" + cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(context.Background(), spec, Config{TempDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one with %q", cmd, err, want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"wc=python3 /opt/wc.py", []string{"python3", "/opt/wc.py"}, ""},
		{`awk=awk -F '\t' '{print $1 "\t" 1}'`, []string{"awk", "-F", `\t`, `{print $1 "\t" 1}`}, ""},
		{`q=a "b c" d\ e "x\"y"`, []string{"a", "b c", "d e", `x"y`}, ""},
		{"bad", nil, "want NAME=COMMAND"},
		{"=cat", nil, "want NAME=COMMAND"},
		{"a b=cat", nil, "may hold only"},
		{"x=", nil, "the command is empty"},
		{"x='open", nil, "unclosed ' quote"},
	}
	for _, c := range cases {
		s, err := ParseSpec(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(s.Args, c.want) {
			t.Errorf("%s: %q %v, want %q", c.in, s.Args, err, c.want)
		}
		if again, err := ParseSpec(s.String()); err != nil || !slices.Equal(again.Args, s.Args) {
			t.Errorf("%s: String %q parses to %q %v", c.in, s.String(), again.Args, err)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a\tb", "\\n", "x\r\n\\", "\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e := AppendEscaped(nil, b)
		if bytes.ContainsAny(e, "\t\n\r") {
			t.Fatalf("escaped %q holds a tab, newline or CR: %q", b, e)
		}
		if got := AppendUnescaped(nil, e); !bytes.Equal(got, b) {
			t.Fatalf("%q escaped %q unescaped %q", b, e, got)
		}
	})
}

func FuzzSplitLine(f *testing.F) {
	for _, s := range []string{"k\tv", "no tab", "a\\tb\tc\\\\", "\t", "k\tv\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		_, k, v, err := SplitLine(nil, line)
		if err != nil {
			return
		}
		re := append(AppendEscaped(nil, k), '\t')
		re = AppendEscaped(re, v)
		_, k2, v2, err := SplitLine(nil, re)
		if err != nil || !bytes.Equal(k, k2) || !bytes.Equal(v, v2) {
			t.Fatalf("%q: %q %q, again %q %q %v", line, k, v, k2, v2, err)
		}
	})
}

func FuzzSplitWords(f *testing.F) {
	for _, s := range []string{`a "b c" 'd'`, `x\ y`, `"`, `''`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitWords(s)
		if err != nil {
			return
		}
		q := Spec{Name: "x", Args: words}
		if len(words) == 0 {
			return
		}
		again, err := ParseSpec(q.String())
		if err != nil || !slices.Equal(again.Args, words) {
			t.Fatalf("%q: words %q, quoted %q, again %q %v", s, words, q.String(), again.Args, err)
		}
	})
}

// logLines is a slog handler keeping the message of each record with stream=stderr.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stream" && a.Value.String() == "stderr" {
			l.lines = append(l.lines, r.Message)
		}
		return true
	})
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func TestProgram_StderrLinesGoToTheJobLog(t *testing.T) {
	// Five lines on stderr, the last without its newline and one longer than a logged line.
	script := `if [ $MAPAGG_ROLE = describe ]; then exit 0; fi; cat >/dev/null; echo one >&2; echo two >&2; ` +
		`head -c 3000 /dev/zero | tr "\0" y >&2; echo >&2; echo four >&2; printf five >&2; echo "k	1"`
	for _, tc := range []struct {
		max  int
		want []string
	}{
		{0, []string{"one", "two", strings.Repeat("y", maxLogLine), "four", "five"}},
		{2, []string{"one", "two", "(3 more lines of stderr left out of the job's log: the first 2 of a run are kept)"}},
	} {
		p := newProgram(t, "sh -c '"+script+"'", Config{StderrLogLines: tc.max})
		env := jobstest.NewEnv()
		env.Put("input", "a.txt", []byte("x\n"))
		var h logLines
		ctx := jobs.ContextWithLogger(context.Background(), slog.New(&h))
		err := p.Map(ctx, jobs.EnvWithLogger(env, slog.New(&h)), jobs.Task{Shard: json.RawMessage(`{"c":"input","b":"a.txt","o":0,"n":2}`)},
			func(k, v []byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h.lines) != fmt.Sprint(tc.want) {
			t.Errorf("StderrLogLines %d: the job's log got %q, want %q", tc.max, h.lines, tc.want)
		}
	}
}

// FuzzStderrLog: whatever a program writes on stderr, in whatever pieces, the job's log gets its
// first lines, each cut at maxLogLine bytes and made valid UTF-8, then a count of the rest.
func FuzzStderrLog(f *testing.F) {
	f.Add([]byte("one\ntwo\r\nthree"), uint16(5), uint8(2))
	f.Add(bytes.Repeat([]byte("x"), 3000), uint16(1500), uint8(1))
	f.Add([]byte("\xff\xfe\n\n\n"), uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, max uint8) {
		var h logLines
		s := &stderrLog{t: &tail{max: 64}, log: slog.New(&h), attrs: []any{"stream", "stderr"}, max: int(max%8) + 1}
		c := min(int(cut), len(data))
		_, _ = s.Write(data[:c])
		_, _ = s.Write(data[c:])
		s.end()
		var want []string
		lines := bytes.Split(data, []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		for i, ln := range lines {
			if i == s.max {
				want = append(want, fmt.Sprintf("(%d more lines of stderr left out of the job's log: the first %d of a run are kept)", len(lines)-s.max, s.max))
				break
			}
			ln = bytes.TrimSuffix(ln[:min(len(ln), maxLogLine)], []byte("\r"))
			want = append(want, string(bytes.ToValidUTF8(ln, []byte("?"))))
		}
		if fmt.Sprint(h.lines) != fmt.Sprint(want) {
			t.Fatalf("logged %q, want %q", h.lines, want)
		}
	})
}

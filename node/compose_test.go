package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
)

// These tests keep docker-compose.yml and the Dockerfile honest: they load the compose file with
// compose-go, the library `docker compose` itself uses, and check it against the binary's own
// flag sets, so the file cannot give the worker a variable it does not read, a value it would
// refuse, or a command it does not have.

const (
	composeFile = "../docker-compose.yml"
	dockerfile  = "../Dockerfile"
	// workerPath is where the Dockerfile puts the binary.
	workerPath = "/usr/local/bin/worker"
)

// loadCompose loads compose files the way `docker compose` does, with every profile enabled and
// an empty environment, so neither the caller's shell nor a .env file changes the result.
func loadCompose(t *testing.T, files ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions(files, cli.WithWorkingDirectory(filepath.Dir(composeFile)),
		cli.WithProfiles([]string{"*"}), cli.WithEnv(nil))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := cli.ProjectFromOptions(context.Background(), opts)
	if err != nil {
		t.Fatalf("load %v: %v", files, err)
	}
	return p
}

func TestCompose_MatchesBinary(t *testing.T) {
	p := loadCompose(t, composeFile)
	for _, problem := range composeProblems(p) {
		t.Error(problem)
	}
}

// TestCompose_CatchesDrift merges one bad change at a time onto docker-compose.yml (an override
// file, as `docker compose -f a.yml -f b.yml` would) and expects exactly that change reported.
func TestCompose_CatchesDrift(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"unknown-env.yml", "WORKER_CONCURENCY"},            // WORKER_CONCURRENCY misspelt
		{"submit-run-env.yml", "LEASE_DURATION"},            // a `run` variable given to `worker submit`
		{"bad-value.yml", `LEASE_DURATION="15"`},            // a duration without a unit
		{"no-healthcheck.yml", "nats: no health check"},     // a service without a health check
		{"depends-started.yml", "service_healthy"},          // a dependency not waited for
		{"in-memory.yml", "--inMemoryPersistence"},          // Azurite's queue freezes in memory
		{"replicas.yml", "3 replicas"},                      // one worker cannot show a takeover
		{"bad-submit.yml", `"shards"`},                      // the example job would be refused
		{"wrong-endpoint.yml", "BlobEndpoint"},              // storage at a host no service has
		{"bad-health-command.yml", "flag provided but not"}, // a flag `worker status` lacks
		{"start-interval.yml", "start_interval"},            // Engine 25+ only
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yml"), func(t *testing.T) {
			p := loadCompose(t, composeFile, filepath.Join("testdata", "compose", tt.file))
			problems := composeProblems(p)
			if len(problems) != 1 || !strings.Contains(problems[0], tt.want) {
				t.Fatalf("want exactly one problem mentioning %q, got %d:\n%s", tt.want, len(problems), strings.Join(problems, "\n"))
			}
			t.Log(problems[0])
		})
	}
}

// composeProblems lists what is wrong with a compose project, one sentence per problem.
func composeProblems(p *types.Project) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	svc := map[string]types.ServiceConfig{}
	for _, name := range []string{"azurite-blob", "azurite-queue", "nats", "worker", "submit"} {
		s, err := p.GetService(name)
		if err != nil {
			add("service %s: missing (%v)", name, err)
			continue
		}
		svc[name] = s
	}
	for name, s := range p.Services {
		if name == "submit" {
			continue
		}
		if hc := s.HealthCheck; hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
			add("%s: no health check", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		if hc := p.Services[name].HealthCheck; hc != nil && hc.StartInterval != nil {
			add("%s: healthcheck.start_interval needs Docker Engine 25 (Engine 20.10, Debian 12's, refuses the whole file): drop it", name)
		}
	}

	// Azurite: blob and queue as two processes, on disk, with the flags Azurite/start.sh uses,
	// from the image of the version Azurite/package.json pins.
	azVersion, err := azuritePin()
	if err != nil {
		add("%v", err)
	}
	ports := map[string]string{}
	for _, kind := range []string{"blob", "queue"} {
		s, ok := svc["azurite-"+kind]
		if !ok {
			continue
		}
		if want := "mcr.microsoft.com/azure-storage/azurite:" + azVersion; s.Image != want {
			add("azurite-%s: image %q, want %q (the version Azurite/package.json pins)", kind, s.Image, want)
		}
		cmd := []string(s.Command)
		if len(cmd) == 0 || cmd[0] != "azurite-"+kind {
			add("azurite-%s: command %q does not start azurite-%s", kind, cmd, kind)
		}
		for _, f := range []string{"--skipApiVersionCheck", "--loose", "--disableTelemetry"} {
			if !slices.Contains(cmd, f) {
				add("azurite-%s: command lacks %s", kind, f)
			}
		}
		if slices.Contains(cmd, "--inMemoryPersistence") {
			add("azurite-%s: --inMemoryPersistence: run Azurite on disk (its queue freezes in memory)", kind)
		}
		if host := argAfter(cmd, "--"+kind+"Host"); host != "0.0.0.0" {
			add("azurite-%s: --%sHost %q, want 0.0.0.0 (other containers connect to it)", kind, kind, host)
		}
		if loc := argAfter(cmd, "--location"); loc == "" || !mounted(s, loc) {
			add("azurite-%s: --location %q is not on a volume", kind, loc)
		}
		ports[kind] = argAfter(cmd, "--"+kind+"Port")
	}

	// NATS: JetStream on, stored on a volume; the alpine image (the health check needs wget) of
	// the minor version the tests run in process.
	if s, ok := svc["nats"]; ok {
		if minor, err := natsPin(); err != nil {
			add("%v", err)
		} else if !strings.HasPrefix(s.Image, "nats:"+minor+".") || !strings.HasSuffix(s.Image, "-alpine") {
			add("nats: image %q, want nats:%s.x-alpine (go.mod's nats-server, with a shell for the health check)", s.Image, minor)
		}
		cmd := []string(s.Command)
		if !slices.Contains(cmd, "--jetstream") && !slices.Contains(cmd, "-js") {
			add("nats: command %q does not enable JetStream", cmd)
		}
		dir := argAfter(cmd, "--store_dir")
		if dir == "" {
			dir = argAfter(cmd, "-sd")
		}
		if dir == "" || !mounted(s, dir) {
			add("nats: store dir %q is not on a volume", dir)
		}
	}

	if s, ok := svc["worker"]; ok {
		if s.Deploy == nil || s.Deploy.Replicas == nil || *s.Deploy.Replicas != 3 {
			add("worker: want 3 replicas (deploy.replicas)")
		}
		for _, dep := range []string{"azurite-blob", "azurite-queue", "nats"} {
			if d, ok := s.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
				add("worker: depends_on %s must have condition service_healthy (got %q)", dep, d.Condition)
			}
		}
		if cmd := []string(s.Command); len(cmd) == 0 || cmd[0] != "run" {
			add("worker: command %q, want run", cmd)
		}
		checkEnv(add, "worker", s)
		checkEndpoints(add, s, ports)
		if hc := s.HealthCheck; hc != nil && len(hc.Test) >= 2 {
			test := []string(hc.Test)
			if test[0] != "CMD" || test[1] != workerPath {
				add("worker: health check %q, want [CMD %s ...] (no shell in the image)", test, workerPath)
			} else if err := checkArgs(test[2:]); err != nil {
				add("worker: health check %q: %v", test, err)
			}
		}
	}
	if s, ok := svc["submit"]; ok {
		if len(s.Profiles) == 0 {
			add("submit: not under a profile, so `docker compose up` would run it")
		}
		if s.Image != svc["worker"].Image {
			add("submit: image %q, want the worker's %q", s.Image, svc["worker"].Image)
		}
		checkEnv(add, "submit", s)
		if err := checkArgs(s.Command); err != nil {
			add("submit: command %q: %v", []string(s.Command), err)
		}
	}
	sort.Strings(out)
	return out
}

// checkEnv checks every environment variable of a service against the subcommand it runs: the
// variable must be one the binary reads (knownEnv), one that subcommand reads, and its value
// must be one the flag accepts.
func checkEnv(add func(string, ...any), name string, s types.ServiceConfig) {
	if len(s.Command) == 0 {
		add("%s: no command", name)
		return
	}
	fs := subcommandFlags(s.Command[0])
	if fs == nil {
		add("%s: command %q: no such worker subcommand", name, s.Command[0])
		return
	}
	reads := map[string]string{} // variable → flag
	for _, fe := range fs.envFlags() {
		reads[fe.Env] = fe.Flag
	}
	keys := make([]string, 0, len(s.Environment))
	for k := range s.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := stockNode().envVars()[k]; !ok {
			add("%s: environment variable %s is not read by the binary (see `worker env`)", name, k)
			continue
		}
		flagName, ok := reads[k]
		if !ok {
			add("%s: environment variable %s is not read by `worker %s`", name, k, s.Command[0])
			continue
		}
		v := s.Environment[k]
		if v == nil || *v == "" {
			continue
		}
		if err := fs.Set(flagName, *v); err != nil {
			add("%s: %s=%q: --%s refuses it: %v", name, k, *v, flagName, err)
		}
	}
	for _, k := range []string{"AZURE_STORAGE_CONNECTION_STRING", "NATS_URL"} {
		if v := s.Environment[k]; v == nil || *v == "" {
			add("%s: %s is not set", name, k)
		}
	}
}

// checkEndpoints checks that the worker's connection string and NATS URL name the services and
// ports of this file.
func checkEndpoints(add func(string, ...any), s types.ServiceConfig, ports map[string]string) {
	if v := s.Environment["AZURE_STORAGE_CONNECTION_STRING"]; v != nil {
		kv := map[string]string{}
		for _, part := range strings.Split(*v, ";") {
			if k, val, ok := strings.Cut(part, "="); ok {
				kv[k] = val
			}
		}
		for _, e := range []struct{ key, kind string }{{"BlobEndpoint", "blob"}, {"QueueEndpoint", "queue"}} {
			want := "azurite-" + e.kind + ":" + ports[e.kind]
			if u, err := url.Parse(kv[e.key]); err != nil || u.Host != want {
				add("worker: connection string %s=%q, want host %s", e.key, kv[e.key], want)
			}
		}
	}
	if v := s.Environment["NATS_URL"]; v != nil {
		if u, err := url.Parse(*v); err != nil || u.Host != "nats:4222" {
			add("worker: NATS_URL=%q, want nats://nats:4222", *v)
		}
	}
}

// stockNode is the node of the stock binary (cmd/worker).
func stockNode() *Node {
	n, err := New(Options{Registry: builtin.Registry()})
	if err != nil {
		panic(err)
	}
	return n
}

// subcommandFlags returns the flag set of a worker subcommand, nil when there is none.
func subcommandFlags(name string) *flagSet {
	for _, c := range stockNode().commands() {
		if c.name == name {
			fs := c.flags()
			fs.SetOutput(io.Discard)
			return fs
		}
	}
	return nil
}

// checkArgs parses a worker command line (without the binary) as the binary would, and for
// submit also validates the job.
func checkArgs(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no subcommand")
	}
	fs := subcommandFlags(args[0])
	if fs == nil {
		return fmt.Errorf("no worker subcommand %q", args[0])
	}
	if err := fs.Parse(interleaved(fs.FlagSet, args[1:])); err != nil {
		return err
	}
	if args[0] == "submit" {
		typ, params := fs.Lookup("type").Value.String(), fs.Lookup("params").Value.String()
		if _, err := (&client.Client{Registry: builtin.Registry()}).Validate(context.Background(), typ, json.RawMessage(params)); err != nil {
			return err
		}
	}
	return nil
}

// argAfter returns the argument after flag in cmd ("" when absent); it also reads --flag=value.
func argAfter(cmd []string, flag string) string {
	for i, a := range cmd {
		if a == flag && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// mounted reports whether path is a named volume's mount point in s.
func mounted(s types.ServiceConfig, path string) bool {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Source != "" && filepath.Clean(v.Target) == filepath.Clean(path) {
			return true
		}
	}
	return false
}

// azuritePin is the Azurite version Azurite/package.json pins.
func azuritePin() (string, error) {
	data, err := os.ReadFile("../Azurite/package.json")
	if err != nil {
		return "", err
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return "", fmt.Errorf("Azurite/package.json: %w", err)
	}
	v := pkg.Dependencies["azurite"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v) {
		return "", fmt.Errorf("Azurite/package.json: azurite %q is not pinned to an exact version", v)
	}
	return v, nil
}

// natsPin is the major.minor of the nats-server module in go.mod.
func natsPin() (string, error) {
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/nats-io/nats-server/v2 v(\d+\.\d+)\.`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("go.mod: no github.com/nats-io/nats-server/v2 requirement")
	}
	return string(m[1]), nil
}

// TestDockerfile_StaticNonRootWithHealthCheck reads the Dockerfile: a static build, a final stage
// that runs as a non-root user, and a HEALTHCHECK that is a real worker command line.
func TestDockerfile_StaticNonRootWithHealthCheck(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	// Join continued lines, drop comments, split into instructions.
	var lines []string
	cur := ""
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		if cur+l != "" {
			lines = append(lines, cur+l)
		}
		cur = ""
	}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			last = i
		}
	}
	if last < 1 {
		t.Fatalf("want a multi-stage build, found the last FROM at instruction %d", last)
	}
	build, final := strings.Join(lines[:last], "\n"), lines[last:]
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "./cmd/worker") {
		t.Errorf("the build stage does not build ./cmd/worker with CGO_ENABLED=0")
	}
	instr := map[string]string{}
	for _, l := range final {
		word, rest, _ := strings.Cut(l, " ")
		instr[strings.ToUpper(word)] = strings.TrimSpace(rest)
	}
	if u, _, _ := strings.Cut(instr["USER"], ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("final stage USER %q: want a non-root user", instr["USER"])
	}
	var entry []string
	if err := json.Unmarshal([]byte(instr["ENTRYPOINT"]), &entry); err != nil || len(entry) != 1 || entry[0] != workerPath {
		t.Errorf("ENTRYPOINT %q: want [%q] in exec form", instr["ENTRYPOINT"], workerPath)
	}
	hc := instr["HEALTHCHECK"]
	_, cmd, ok := strings.Cut(hc, "CMD ")
	var args []string
	if !ok || json.Unmarshal([]byte(strings.TrimSpace(cmd)), &args) != nil || len(args) < 2 || args[0] != workerPath {
		t.Fatalf("HEALTHCHECK %q: want CMD [%q, ...] in exec form (the image has no shell)", hc, workerPath)
	}
	if err := checkArgs(args[1:]); err != nil {
		t.Errorf("HEALTHCHECK %q: %v", args, err)
	}
}

// TestDockerfile_BuildsWithoutBuildKit: the classic builder (DOCKER_BUILDKIT=0, Engine 20.10) sets
// no platform arguments, knows no RUN --mount, and takes one name per ARG.
func TestDockerfile_BuildsWithoutBuildKit(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if d, ok := strings.CutPrefix(strings.ReplaceAll(l, " ", ""), "#syntax="); ok && i == 0 {
			t.Errorf("Dockerfile:1: # syntax=%s makes BuildKit fetch that frontend from a registry before building: offline builds fail", d)
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, v := range []string{"BUILDPLATFORM", "TARGETPLATFORM", "BUILDOS", "BUILDARCH"} {
			if strings.Contains(l, "$"+v) || (strings.Contains(l, "${"+v) && !strings.Contains(l, "${"+v+":-")) {
				t.Errorf("Dockerfile:%d: %s without a default (${%s:-...}): the classic builder leaves it empty", i+1, v, v)
			}
		}
		if strings.Contains(l, "--mount=") {
			t.Errorf("Dockerfile:%d: RUN --mount needs BuildKit", i+1)
		}
		if f := strings.Fields(l); len(f) > 2 && strings.EqualFold(f[0], "ARG") {
			t.Errorf("Dockerfile:%d: %q: one name per ARG for the classic builder", i+1, l)
		}
	}
}

// TestCompose_WalkThroughIsSelfConsistent reads the takeover walk-through in the compose file's
// comments: MAP_DELAY is exported (not set for one command), every `run` after the kill keeps
// the killed worker down (--no-deps), and a detached submit is removed before `down -v`.
// (No Docker daemon runs where the tests run; this checks the commands as written.)
func TestCompose_WalkThroughIsSelfConsistent(t *testing.T) {
	f, err := os.Open(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "#"))
		if cmd, _, _ := strings.Cut(l, "   "); strings.HasPrefix(cmd, "docker ") || strings.HasPrefix(cmd, "export ") ||
			strings.HasPrefix(cmd, "MAP_DELAY=") || strings.HasPrefix(cmd, "unset ") {
			cmds = append(cmds, strings.TrimSpace(cmd))
		}
	}
	exported, killed, detachedName := false, false, ""
	for _, c := range cmds {
		switch {
		case strings.HasPrefix(c, "MAP_DELAY="):
			t.Errorf("%q: MAP_DELAY for one command only; the next compose command recreates the workers without it: export it", c)
		case strings.HasPrefix(c, "export MAP_DELAY="):
			exported = true
		case strings.HasPrefix(c, "docker kill"):
			killed = true
		case strings.Contains(c, "compose") && strings.Contains(c, " run ") && exported && !strings.Contains(c, "--no-deps"):
			t.Errorf("%q: without --no-deps, run restarts the killed worker through depends_on", c)
		}
		if strings.Contains(c, " run ") && strings.Contains(c, " -d ") {
			if _, after, ok := strings.Cut(c, "--name "); ok {
				detachedName = strings.Fields(after)[0]
			} else {
				t.Errorf("%q: a detached run needs --name so it can be removed before down -v", c)
			}
		}
	}
	if !exported || !killed {
		t.Fatalf("walk-through not found (export MAP_DELAY %v, docker kill %v) in:\n%s", exported, killed, strings.Join(cmds, "\n"))
	}
	removed := func(c string) bool {
		return strings.HasPrefix(c, "docker rm -f "+detachedName) || strings.Contains(c, " down ") && strings.Contains(c, "--remove-orphans")
	}
	if detachedName != "" && !slices.ContainsFunc(cmds, removed) {
		t.Errorf("the detached submit %s is never removed: `down -v` without --remove-orphans leaves it and the network behind", detachedName)
	}
}

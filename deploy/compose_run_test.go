package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCompose_WalkThroughRuns runs the takeover walk-through in docker-compose.yml's comments,
// command by command as a person would type them (each through bash, in the repository root),
// with <LEADER> and <JOB> filled in from the output before them. A `status` is repeated, as the
// notes say, until what it is there to show: before the kill a leader and the job running; after
// it another leader with a higher epoch; then the job succeeded. The result must be exactly
// {"count":1270607}, and after `down -v` nothing of the project may remain.
//
// It needs a Docker daemon, the Compose v2 plugin and the upstream images (or the local
// stand-ins deploy/docker/standins/build.sh makes); without them it skips, saying which is
// missing and what provides it. It takes minutes (the image build), so -short skips it too.
func TestCompose_WalkThroughRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the compose walk-through builds an image and runs a cluster for minutes")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := parseWalkThrough(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if why := composeMissing(root, string(text)); why != "" {
		t.Skip(why)
	}
	const project, detached = "mapagg", "mapagg-submit"
	if left := leftovers(project, detached); left != "" {
		t.Skipf("project %s is already up here (%s); the walk-through starts from nothing: docker compose down -v --remove-orphans",
			project, left)
	}

	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, k := range []string{"MAP_DELAY", "COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES"} {
		delete(env, k)
	}
	run := func(ctx context.Context, cmd string) (string, error) {
		c := exec.CommandContext(ctx, "bash", "-c", cmd)
		c.Dir = root
		for k, v := range env {
			c.Env = append(c.Env, k+"="+v)
		}
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if err != nil {
			err = fmt.Errorf("%w\nstderr: %s", err, lastLines(stderr.String(), 20))
		}
		return stdout.String(), err
	}
	downed := false
	t.Cleanup(func() {
		if downed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, c := range []string{"docker rm -f " + detached, "docker compose down -v --remove-orphans"} {
			if out, err := run(ctx, c); err != nil {
				t.Logf("cleanup %q: %v\n%s", c, err, out)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	vars := map[string]string{}
	var (
		killed        bool
		before        statusView // the last status before the kill
		killedAt      time.Time
		afterStatuses int
		sawResult     bool
	)
	// poll runs a status command until ok accepts its output, or fails the test after limit.
	poll := func(cmd string, limit time.Duration, what string, ok func(statusView) bool) statusView {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			out, err := run(ctx, cmd)
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
			v, err := parseStatus(out)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			if ok(v) {
				t.Logf("$ %s\n%s", cmd, out)
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not %s within %v; last output:\n%s", cmd, what, limit, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	for _, s := range steps {
		if k, v, ok := strings.Cut(strings.TrimPrefix(s.Cmd, "export "), "="); ok && strings.HasPrefix(s.Cmd, "export ") {
			env[k] = v
			t.Logf("$ %s", s.Cmd)
			continue
		}
		if k, ok := strings.CutPrefix(s.Cmd, "unset "); ok {
			delete(env, strings.TrimSpace(k))
			t.Logf("$ %s", s.Cmd)
			continue
		}
		cmd, err := fill(s.Cmd, vars)
		if err != nil {
			t.Fatalf("docker-compose.yml:%d: %v", s.Line, err)
		}
		switch {
		case strings.HasSuffix(cmd, " submit status") && !killed:
			before = poll(cmd, 2*time.Minute, "showing a leader and one running job", func(v statusView) bool {
				for id, st := range v.Jobs {
					if st == "succeeded" {
						t.Fatalf("job %s already succeeded before the kill: MAP_DELAY no longer makes the job outlast the walk-through", id)
					}
				}
				return v.Leader != "" && len(v.Jobs) == 1 && onlyValue(v.Jobs) == "running"
			})
			c, err := containerOf(before.Leader)
			if err != nil {
				t.Fatal(err)
			}
			vars["LEADER"] = c
			for id := range before.Jobs {
				vars["JOB"] = id
			}
		case strings.HasSuffix(cmd, " submit status") && killed:
			afterStatuses++
			if afterStatuses == 1 {
				v := poll(cmd, time.Minute, "showing another leader", func(v statusView) bool {
					return v.Leader != "" && v.Leader != before.Leader
				})
				if v.Epoch <= before.Epoch {
					t.Errorf("new leader %s has epoch %d, not above the killed leader's %d", v.Leader, v.Epoch, before.Epoch)
				}
				t.Logf("takeover: %s (epoch %d) → %s (epoch %d), seen %v after the kill",
					before.Leader, before.Epoch, v.Leader, v.Epoch, time.Since(killedAt).Round(100*time.Millisecond))
				if c, _ := containerOf(v.Leader); c == vars["LEADER"] {
					t.Errorf("the new leader %s runs in the killed container: it was restarted before the takeover was seen", v.Leader)
				}
			} else {
				poll(cmd, 5*time.Minute, "showing job "+vars["JOB"]+" succeeded", func(v statusView) bool {
					if st := v.Jobs[vars["JOB"]]; st == "failed" || st == "cancelled" {
						t.Fatalf("job %s %s", vars["JOB"], st)
					}
					return v.Jobs[vars["JOB"]] == "succeeded"
				})
			}
		default:
			start := time.Now()
			out, err := run(ctx, cmd)
			t.Logf("$ %s   (%v)\n%s", cmd, time.Since(start).Round(100*time.Millisecond), lastLines(out, 15))
			if err != nil {
				t.Fatalf("docker-compose.yml:%d: %s: %v", s.Line, cmd, err)
			}
			switch {
			case strings.HasPrefix(cmd, "docker kill "):
				killed, killedAt = true, time.Now()
			case strings.Contains(cmd, " submit result "):
				sawResult = true
				want := regexp.MustCompile(`\{[^}]*\}`).FindString(s.Note)
				if want == "" {
					t.Fatalf("docker-compose.yml:%d: the note %q states no result", s.Line, s.Note)
				}
				if got := strings.TrimSpace(out); got != want || want != `{"count":1270607}` {
					t.Errorf("%s: %q, want %q (the note says %q)", cmd, got, `{"count":1270607}`, want)
				}
			case strings.Contains(cmd, "compose down -v"):
				downed = true
				if left := leftovers(project, detached); left != "" {
					t.Errorf("after %q: %s remain", cmd, left)
				}
			}
		}
	}
	if !killed || afterStatuses < 2 || !sawResult || !downed {
		t.Errorf("the walk-through lacks a step: kill %v, statuses after it %d (want 2), result %v, down -v %v",
			killed, afterStatuses, sawResult, downed)
	}
}

// composeMissing names what the walk-through needs and this machine lacks, with the command
// that provides it; "" when everything is there.
func composeMissing(root, composeText string) string {
	if _, err := exec.LookPath("docker"); err != nil {
		return "no docker CLI: apt-get install docker.io"
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return "no Docker daemon answers `docker info` (" + lastLines(string(out), 1) + "): apt-get install docker.io && dockerd &"
	}
	if err := exec.Command("docker", "compose", "version").Run(); err != nil {
		return "no Compose v2 plugin (`docker compose version` fails): apt-get install docker-compose-plugin, " +
			"or go install github.com/docker/compose/v2/cmd@v2.29.7 and copy the binary to ~/.docker/cli-plugins/docker-compose"
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return err.Error()
	}
	var missing []string
	for _, img := range baseImages(string(dockerfile), composeText) {
		if exec.Command("docker", "image", "inspect", img).Run() != nil {
			missing = append(missing, img)
		}
	}
	if missing != nil {
		return "image " + strings.Join(missing, ", ") + " missing: docker pull, or where no registry is reachable " +
			"build local stand-ins: deploy/docker/standins/build.sh"
	}
	// The cluster publishes its ports on 127.0.0.1; one already taken would fail `up` midway.
	for _, m := range regexp.MustCompile(`"(127\.0\.0\.1:\d+):\d+"`).FindAllStringSubmatch(composeText, -1) {
		l, err := net.Listen("tcp", m[1])
		if err != nil {
			return "port " + m[1] + " is in use (another Azurite or NATS?); the compose cluster publishes it: stop what holds it"
		}
		l.Close()
	}
	return ""
}

// baseImages are the images the build and the cluster start from: the Dockerfile's FROM lines
// (GO_VERSION filled in, the platform flag dropped) and the compose file's image: lines other
// than the worker's own.
func baseImages(dockerfile, composeText string) []string {
	goVersion := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)`).FindStringSubmatch(dockerfile)
	var out []string
	add := func(img string) {
		if !slices.Contains(out, img) {
			out = append(out, img)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)`).FindAllStringSubmatch(dockerfile, -1) {
		img := m[1]
		if goVersion != nil {
			img = strings.ReplaceAll(img, "${GO_VERSION}", goVersion[1])
		}
		add(img)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+image:\s+(\S+)`).FindAllStringSubmatch(composeText, -1) {
		if !strings.HasPrefix(m[1], "mapagg/") {
			add(m[1])
		}
	}
	return out
}

// leftovers lists the containers, networks and volumes of the compose project, and the detached
// submit container, that exist; "" when none does.
func leftovers(project, detached string) string {
	label := "label=com.docker.compose.project=" + project
	var found []string
	for _, q := range [][]string{
		{"ps", "-a", "--filter", label, "--format", "container {{.Names}}"},
		{"ps", "-a", "--filter", "name=^" + detached + "$", "--format", "container {{.Names}}"},
		{"network", "ls", "--filter", label, "--format", "network {{.Name}}"},
		{"volume", "ls", "--filter", label, "--format", "volume {{.Name}}"},
	} {
		out, err := exec.Command("docker", q...).CombinedOutput()
		if err != nil {
			found = append(found, fmt.Sprintf("docker %s failed: %v", strings.Join(q, " "), err))
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			if l != "" && !slices.Contains(found, l) {
				found = append(found, l)
			}
		}
	}
	return strings.Join(found, ", ")
}

// onlyValue is the only value of a one-entry map.
func onlyValue(m map[string]string) string {
	for _, v := range m {
		return v
	}
	return ""
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

package deploy_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// These run without Docker: the parsing and filling-in that TestCompose_WalkThroughRuns relies on.

func TestParseWalkThrough(t *testing.T) {
	text := strings.Join([]string{
		"# Quick start:",
		"#   docker compose up -d --build              # start",
		"#   docker compose down -v",
		"#",
		"# The takeover:",
		"#",
		"#   export MAP_DELAY=300ms                    # slow",
		"#   docker compose run --rm submit status     # \"leader: <LEADER>-1\"",
		"#   docker kill --signal KILL <LEADER>",
		"#   docker compose run --rm submit result <JOB>   # exactly {\"count\":1}",
		"#                                             # and more note",
		"#   docker rm -f x; unset MAP_DELAY           # two commands",
		"#",
		"#   AZURE_STORAGE_CONNECTION_STRING=x go run ./cmd/worker status",
		"",
		"name: mapagg",
	}, "\n")
	got, err := parseWalkThrough(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []step{
		{7, "export MAP_DELAY=300ms", "slow"},
		{8, "docker compose run --rm submit status", `"leader: <LEADER>-1"`},
		{9, "docker kill --signal KILL <LEADER>", ""},
		{10, "docker compose run --rm submit result <JOB>", `exactly {"count":1} and more note`},
		{12, "docker rm -f x", "two commands"},
		{12, "unset MAP_DELAY", "two commands"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}

	if _, err := parseWalkThrough("#   docker compose up -d\n"); err == nil || !strings.Contains(err.Error(), "docker kill") {
		t.Errorf("no walk-through: err %v, want one naming `docker kill`", err)
	}
	two := "#   docker kill a\n#\n#   docker kill b\n"
	if _, err := parseWalkThrough(two); err == nil || !strings.Contains(err.Error(), "two comment blocks") {
		t.Errorf("two walk-throughs: err %v", err)
	}
}

// The real compose file: the walk-through is found and has every step the run test drives.
func TestParseWalkThrough_ComposeFile(t *testing.T) {
	text, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := parseWalkThrough(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, s := range steps {
		cmds = append(cmds, s.Cmd)
	}
	all := strings.Join(cmds, "\n")
	for _, want := range []string{"export MAP_DELAY=", "compose up -d --build", " -d --no-deps --name mapagg-submit submit",
		"docker kill --signal KILL <LEADER>", "submit result <JOB>", "compose down -v --remove-orphans"} {
		if !strings.Contains(all, want) {
			t.Errorf("walk-through lacks %q:\n%s", want, all)
		}
	}
	statuses := strings.Count(all, "submit status")
	kill := strings.Index(all, "docker kill")
	if after := strings.Count(all[kill:], "submit status"); statuses-after < 1 || after != 2 {
		t.Errorf("want a status before the kill and two after it (takeover, then succeeded); got %d before, %d after", statuses-after, after)
	}
	if !strings.HasSuffix(all, "compose down -v --remove-orphans") {
		t.Errorf("the walk-through must end with `docker compose down -v --remove-orphans` (it removes the detached submit):\n%s", all)
	}
	for _, s := range steps {
		if strings.Contains(s.Cmd, "submit result") && !strings.Contains(s.Note, `{"count":1270607}`) {
			t.Errorf("line %d: the result's note %q does not state {\"count\":1270607}", s.Line, s.Note)
		}
	}
}

func TestFill(t *testing.T) {
	vars := map[string]string{"LEADER": "4f9c2a1b7e3d", "JOB": "j-1"}
	got, err := fill("docker kill --signal KILL <LEADER>; echo <JOB> <LEADER>", vars)
	if err != nil || got != "docker kill --signal KILL 4f9c2a1b7e3d; echo j-1 4f9c2a1b7e3d" {
		t.Errorf("fill: %q, %v", got, err)
	}
	if got, err := fill("docker compose up -d", nil); err != nil || got != "docker compose up -d" {
		t.Errorf("no placeholder: %q, %v", got, err)
	}
	if _, err := fill("result <JOB> <WHO>", map[string]string{"JOB": "x"}); err == nil || !strings.Contains(err.Error(), "<WHO>") {
		t.Errorf("unknown placeholder: err %v, want one naming <WHO>", err)
	}
	if _, err := fill("result <JOB>", map[string]string{"JOB": ""}); err == nil {
		t.Error("empty value accepted")
	}
}

func TestParseStatus(t *testing.T) {
	out := "leader: 4f9c2a1b7e3d-1 (epoch 7, since 2026-11-21T13:00:00Z, 3s ago)\n\n" +
		"JOB        TYPE    STATE     DONE/TOTAL  ERROR\n" +
		"j-1        primes  running   12/200\n" +
		"j-0        primes  failed    3/200       shard 4: boom\n"
	v, err := parseStatus(out)
	if err != nil {
		t.Fatal(err)
	}
	want := statusView{Leader: "4f9c2a1b7e3d-1", Epoch: 7, Jobs: map[string]string{"j-1": "running", "j-0": "failed"}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("got %+v, want %+v", v, want)
	}
	v, err = parseStatus("leader: none (no worker holds the lease)\njobs: none\n")
	if err != nil || v.Leader != "" || len(v.Jobs) != 0 {
		t.Errorf("no leader: %+v, %v", v, err)
	}
	if _, err := parseStatus("Error: storage unreachable\n"); err == nil {
		t.Error("output without a leader line accepted")
	}
}

func TestContainerOf(t *testing.T) {
	if c, err := containerOf("4f9c2a1b7e3d-1"); err != nil || c != "4f9c2a1b7e3d" {
		t.Errorf("containerOf: %q, %v", c, err)
	}
	for _, bad := range []string{"w0", "-1", "host-x"} {
		if _, err := containerOf(bad); err == nil {
			t.Errorf("containerOf(%q) accepted", bad)
		}
	}
}

func TestBaseImages(t *testing.T) {
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	got := baseImages(string(df), string(cf))
	if len(got) != 4 {
		t.Fatalf("want 4 base images (golang, distroless, azurite, nats), got %q", got)
	}
	for _, img := range got {
		if strings.Contains(img, "$") || strings.HasPrefix(img, "mapagg/") || !strings.Contains(img, ":") {
			t.Errorf("base image %q: want a pinned upstream tag", img)
		}
	}
}

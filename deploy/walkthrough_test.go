package deploy_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The compose file's takeover walk-through is documentation and test script at once. The test
// that runs it (compose_run_test.go) reads the commands from the file's comments. So what a
// person is told to type and what the test types cannot drift apart.

// step is one command of the walk-through and the note beside it.
type step struct {
	Line int    // 1-based line in the compose file
	Cmd  string // the command as written, placeholders (<LEADER>, <JOB>) unfilled
	Note string // the comment beside it and on the note-only lines under it
}

// A command line of a comment block: "#   cmd", optionally followed by "  # note". A line with
// only a note ("#        # more") continues the previous step's note.
var (
	cmdLine  = regexp.MustCompile(`^#   +(\S.*?)(?:\s{2,}#\s?(.*))?$`)
	noteLine = regexp.MustCompile(`^#\s{3,}#\s?(.*)$`)
	holder   = regexp.MustCompile(`<([A-Z]+)>`)
)

// parseWalkThrough returns the steps of the comment block that contains a `docker kill`: a
// block is a run of indented comment lines; a line's commands are split at ';'.
func parseWalkThrough(text string) ([]step, error) {
	var blocks [][]step
	var cur []step
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, cur)
		}
		cur = nil
	}
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, " \t\r")
		if m := noteLine.FindStringSubmatch(l); m != nil && len(cur) > 0 {
			cur[len(cur)-1].Note += " " + strings.TrimSpace(m[1])
			continue
		}
		m := cmdLine.FindStringSubmatch(l)
		if m == nil {
			flush()
			continue
		}
		for c := range strings.SplitSeq(m[1], ";") {
			if c = strings.TrimSpace(c); c != "" {
				cur = append(cur, step{Line: i + 1, Cmd: c, Note: strings.TrimSpace(m[2])})
			}
		}
	}
	flush()
	var found []step
	for _, b := range blocks {
		for _, s := range b {
			if strings.HasPrefix(s.Cmd, "docker kill ") {
				if found != nil {
					return nil, fmt.Errorf("two comment blocks run `docker kill` (lines %d and %d): keep one walk-through", found[0].Line, b[0].Line)
				}
				found = b
				break
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no comment block with `docker kill`: the takeover walk-through is missing")
	}
	return found, nil
}

// fill replaces every <NAME> placeholder in cmd with vars[NAME], and refuses a placeholder it
// has no value for (the command would reach the shell as a redirection).
func fill(cmd string, vars map[string]string) (string, error) {
	var missing []string
	out := holder.ReplaceAllStringFunc(cmd, func(h string) string {
		name := h[1 : len(h)-1]
		v, ok := vars[name]
		if !ok || v == "" {
			missing = append(missing, h)
			return h
		}
		return v
	})
	if missing != nil {
		return "", fmt.Errorf("%q: no value yet for %s", cmd, strings.Join(missing, ", "))
	}
	return out, nil
}

// statusView is what `worker status` prints, as far as the walk-through needs it.
type statusView struct {
	Leader string // "" when no worker holds the lease
	Epoch  int64
	Jobs   map[string]string // job id → state
}

var leaderLine = regexp.MustCompile(`^leader: (\S+) \(epoch (\d+)`)

// parseStatus reads `worker status` output: the leader line and the job table.
func parseStatus(out string) (statusView, error) {
	v := statusView{Jobs: map[string]string{}}
	sawLeader, inTable := false, false
	for l := range strings.SplitSeq(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "leader: none"):
			sawLeader = true
		case leaderLine.MatchString(l):
			m := leaderLine.FindStringSubmatch(l)
			v.Leader = m[1]
			v.Epoch, _ = strconv.ParseInt(m[2], 10, 64)
			sawLeader = true
		case strings.HasPrefix(l, "JOB ") && strings.Contains(l, "STATE"):
			inTable = true
		case inTable && l != "":
			f := strings.Fields(l)
			if len(f) < 3 {
				return v, fmt.Errorf("job row %q: want JOB TYPE STATE ...", l)
			}
			v.Jobs[f[0]] = f[2]
		}
	}
	if !sawLeader {
		return v, fmt.Errorf("no leader line in status output:\n%s", out)
	}
	return v, nil
}

// containerOf is the container id in a worker id "<container id>-<pid>" (a container's hostname
// is its short id, and WORKER_ID defaults to <hostname>-<pid>).
func containerOf(workerID string) (string, error) {
	i := strings.LastIndexByte(workerID, '-')
	if i <= 0 {
		return "", fmt.Errorf("worker id %q is not <container id>-<pid>", workerID)
	}
	if _, err := strconv.Atoi(workerID[i+1:]); err != nil {
		return "", fmt.Errorf("worker id %q is not <container id>-<pid>", workerID)
	}
	return workerID[:i], nil
}

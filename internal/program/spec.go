package program

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode"
)

// Spec is one registered program: a job type name and the command that runs it.
type Spec struct {
	Name string   // the job type
	Args []string // the command: Args[0] is the executable, found in PATH if it has no '/'
}

// String is NAME=COMMAND, with each word quoted where it needs it.
func (s Spec) String() string {
	q := make([]string, len(s.Args))
	for i, a := range s.Args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return s.Name + "=" + strings.Join(q, " ")
}

// ParseSpec parses NAME=COMMAND. COMMAND is split into words as a shell would split it (blanks
// separate words; '...' and "..." quote; a backslash escapes the next character), but no shell
// runs it: no variables, globs, pipes or redirections.
func ParseSpec(s string) (Spec, error) {
	name, cmd, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return Spec{}, fmt.Errorf("program %q: want NAME=COMMAND, e.g. wordcount=python3 /opt/jobs/wordcount.py", s)
	}
	if err := checkName(name); err != nil {
		return Spec{}, fmt.Errorf("program %q: %w", s, err)
	}
	args, err := SplitWords(cmd)
	if err != nil {
		return Spec{}, fmt.Errorf("program %s: %w", name, err)
	}
	if len(args) == 0 {
		return Spec{}, fmt.Errorf("program %s: the command is empty: want NAME=COMMAND", name)
	}
	return Spec{Name: name, Args: args}, nil
}

// checkName applies the registry's rule for a job type name.
func checkName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("the name %q is longer than 64 bytes", name)
	}
	for _, c := range name {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("the name %q may hold only letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// SplitWords splits s into words as a POSIX shell does, without expanding anything: blanks
// separate words, single quotes keep everything, double quotes keep everything but \" \\ \$ \`,
// and a backslash outside quotes escapes the next character. An unclosed quote is an error.
func SplitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("the command has an unclosed ' quote")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`the command has an unclosed " quote`)
			}
			inWord = true
		case c == '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' { // a backslash-newline joins lines
					w.WriteByte(s[i])
				}
			}
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// Resolve finds the program's executable: in PATH when Args[0] has no '/'. A missing file, a
// directory or a file without execute permission is an error that says which.
func (s Spec) Resolve() (string, error) {
	path, err := exec.LookPath(s.Args[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("program %s: %q is not in PATH (%s)", s.Name, s.Args[0], os.Getenv("PATH"))
		}
		fi, serr := os.Stat(s.Args[0])
		switch {
		case serr != nil:
			return "", fmt.Errorf("program %s: %s does not exist", s.Name, s.Args[0])
		case fi.IsDir():
			return "", fmt.Errorf("program %s: %s is a directory", s.Name, s.Args[0])
		case fi.Mode()&0o111 == 0:
			return "", fmt.Errorf("program %s: %s is not executable (mode %v): chmod +x it, or name its interpreter (python3 %s)",
				s.Name, s.Args[0], fi.Mode().Perm(), s.Args[0])
		}
		return "", fmt.Errorf("program %s: %w", s.Name, err)
	}
	// A relative path is the worker's: the program runs in a directory of its own.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return path, nil
}

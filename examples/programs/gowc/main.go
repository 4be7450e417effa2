// Command gowc is a word count in Go as a mapagg program: a binary of its own, not compiled into
// the worker. Build it and register it: worker run --program 'gowc=/path/to/gowc'.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer out.Flush()
	switch os.Getenv("MAPAGG_ROLE") {
	case "describe":
		fmt.Fprintln(out, `{"combine":false}`)
	case "map":
		// Count in memory per shard, then write one line a word: the map-side combine.
		counts := map[string]int{}
		for in.Scan() {
			for _, w := range bytes.Fields(in.Bytes()) {
				counts[string(w)]++
			}
		}
		for w, n := range counts {
			// A backslash is written \\ (words hold no tab, newline or CR).
			fmt.Fprintf(out, "%s\t%d\n", bytes.ReplaceAll([]byte(w), []byte(`\`), []byte(`\\`)), n)
		}
	case "reduce":
		// Lines come sorted by key: sum while the key stays the same.
		var key []byte
		sum, started := 0, false
		for in.Scan() {
			k, v, ok := bytes.Cut(in.Bytes(), []byte{'\t'})
			n, err := strconv.Atoi(string(v))
			if !ok || err != nil {
				fmt.Fprintf(os.Stderr, "gowc: bad line %q\n", in.Text())
				os.Exit(1)
			}
			if started && !bytes.Equal(k, key) {
				fmt.Fprintf(out, "%s\t%d\n", key, sum)
				sum = 0
			}
			key, started = append(key[:0], k...), true
			sum += n
		}
		if started {
			fmt.Fprintf(out, "%s\t%d\n", key, sum)
		}
	default:
		fmt.Fprintf(os.Stderr, "gowc: MAPAGG_ROLE %q: want describe, map or reduce\n", os.Getenv("MAPAGG_ROLE"))
		os.Exit(2)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "gowc:", err)
		os.Exit(1)
	}
}

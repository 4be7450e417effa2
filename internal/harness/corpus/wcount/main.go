// Command wcount is the single-process word count a keyed wordcount is judged against:
//
//	wcount [-naive] [-workers N] -out FILE DIR
//
// counts the words of every regular file in DIR (runs of runes that are not unicode.IsSpace)
// and writes word<TAB>count lines to FILE. Without -naive it is the fast count (chunks at
// whitespace, one goroutine a core, open-addressing tables); with -naive a newcomer's count
// (bufio, strings.FieldsFunc, a map). The caller measures its wall time and CPU-seconds.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/mapagg/mapagg/internal/harness/corpus"
)

func main() {
	naive := flag.Bool("naive", false, "the naive count (one goroutine, a Go map) instead of the fast one")
	workers := flag.Int("workers", 0, "goroutines of the fast count (default GOMAXPROCS)")
	out := flag.String("out", "", "write word<TAB>count lines to `FILE` (required)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: wcount [-naive] [-workers N] -out FILE DIR\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out, *naive, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "wcount:", err)
		os.Exit(1)
	}
}

func run(dir, out string, naive bool, workers int) error {
	files, err := corpus.Files(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if naive {
		err = corpus.CountNaive(files, w)
	} else {
		err = corpus.CountFast(files, workers, w)
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Command csvsum is the single-process per-user sum a keyed sum over CSV rows is judged against:
//
//	csvsum -out FILE DIR
//
// sums the amount per user over every regular file in DIR ("user,amount" lines after a
// "user,amount" header) the way a newcomer writes it in Go (bufio lines, strings.Cut,
// strconv.ParseInt, a map, one goroutine) and writes user<TAB>sum lines to FILE. The caller
// measures its wall time and CPU-seconds.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/mapagg/mapagg/internal/harness/corpus"
)

func main() {
	out := flag.String("out", "", "write user<TAB>sum lines to `FILE` (required)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: csvsum -out FILE DIR\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out); err != nil {
		fmt.Fprintln(os.Stderr, "csvsum:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	files, err := corpus.Files(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = corpus.SumCSVNaive(files, w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

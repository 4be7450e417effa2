// Command sales is a mapagg worker with a keyed job of its own, "sales": the total amount per
// customer over CSV blobs of "customer,cents" lines, every customer's total written to output
// blobs. It is the stock worker command line with one more job type:
//
//	sales run &
//	sales submit --type sales --params '{"container": "data", "prefix": "sales/"}' --wait
//	sales output JOB > totals.tsv      # customer<TAB>cents, one line per customer
//
// The job is sales.go: 24 lines of job code. The cluster partitions the customers, sums each
// one's amounts on the map side (Combine) and again in the reduce (Reduce), and writes one
// output blob per partition, sorted by customer; no process holds every customer.
package main

import (
	"log"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/node"
)

// salesJob is the registered job.
func salesJob() jobs.KeyedJob { return jobs.Keyed("sales", Sales{}) }

func main() {
	if err := jobs.RegisterKeyed(salesJob()); err != nil {
		log.Fatal(err)
	}
	node.Main(node.Options{Registry: jobs.Default()})
}

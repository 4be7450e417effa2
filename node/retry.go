package node

import (
	"context"
	"fmt"
	"io"
	"time"
)

func (n *Node) retryCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newJobFlags("retry")
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, done, err := n.client(ctx, &f.common, true)
	if err != nil {
		return err
	}
	defer done()
	nid, err := cl.Retry(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, nid)
	return nil
}

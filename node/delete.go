package node

import (
	"context"
	"fmt"
	"io"
	"time"
)

func (n *Node) deleteCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newJobFlags("delete")
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, done, err := n.client(ctx, &f.common, true)
	if err != nil {
		return err
	}
	defer done()
	if err := cl.Delete(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job %s deleted\n", id)
	return nil
}

// Package lifecycle sees a leader term's jobs out: clean-up, retry, ended markers, retention.
//
// It holds no job of the term's loop, only their stored checkpoints, and fences its writes with
// the term's fence. Its Sweeper deletes ended jobs' active markers in batches, when intake is
// quiet.
package lifecycle

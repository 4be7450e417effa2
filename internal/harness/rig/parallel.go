package rig

import (
	"errors"
	"sync"
)

// Parallel feeds tasks to n workers through one queue and waits for them all. A worker takes
// tasks until the queue is empty or it gives up; their errors are joined.
func Parallel[T any](n int, tasks []T, worker func(i int, queue <-chan T) error) error {
	queue := make(chan T, len(tasks))
	for _, t := range tasks {
		queue <- t
	}
	close(queue)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = worker(i, queue)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

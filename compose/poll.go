package compose

import (
	"context"
	"errors"
	"sync"
	"time"
)

// poll calls check until it reports done or fails, sleeping every
// between calls, for at most limit: then it returns expired() (which may
// describe the last state check saw). When ctx ends while poll sleeps it
// returns ctx.Err().
func poll(ctx context.Context, limit, every time.Duration, check func() (bool, error), expired func() error) error {
	deadline := time.Now().Add(limit)
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return expired()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// parallel runs f on every item (nodes, servers) at once and joins
// their errors.
func parallel[T any](items []T, f func(T) error) error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = f(it) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

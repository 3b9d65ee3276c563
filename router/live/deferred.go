package live

import (
	"errors"
	"fmt"
	"time"

	"github.com/causallab/causallab/router"
)

// ErrDeferred matches (errors.Is) a *ReadError whose read was deferred:
// no replica held what it needs within its budget and it may not fall back
// to the primary (router.Policy.Defer, or router.CapDefer above the cap).
// Nothing ran, on any node; ReadError.RetryAfter says when to try again.
var ErrDeferred = errors.New("router: read deferred (retry later; the primary was not used)")

// deferred builds the typed error of an ActDefer decision and counts it:
// outcome "deferred" in reads_total (by the caller) and
// causallab_router_deferrals_total by reason.
func (r *Router[P]) deferred(d router.Decision, waited time.Duration, trace []TraceStep) *ReadError {
	r.m.deferrals.WithLabelValues(d.Reason.String()).Inc()
	return &ReadError{Reason: d.Reason, Outcome: router.OutDeferred, Waited: waited, RetryAfter: d.RetryAfter, Trace: trace}
}

// deferredMessage is ReadError.Error for a deferral.
func deferredMessage(e *ReadError) string {
	return fmt.Sprintf("router: read deferred: %v (after waiting %v); retry after %v", e.Reason, e.Waited, e.RetryAfter)
}

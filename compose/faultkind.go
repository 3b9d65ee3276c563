package compose

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultKind names one fault of a topology: the word `causallab fault`
// takes, and the kind of a lab event (package lab adds only its own
// "drift", which is load, not a fault). This is the one list of them.
type FaultKind string

const (
	// FaultKill stops a node without a clean shutdown (Kill).
	FaultKill FaultKind = "kill"
	// FaultRestart starts a node again with its data kept (Restart).
	FaultRestart FaultKind = "restart"
	// FaultPause freezes a node's process (Pause).
	FaultPause FaultKind = "pause"
	// FaultResume thaws it (Resume).
	FaultResume FaultKind = "resume"
	// FaultStopApplier stops a replica's SQL thread (StopApplier).
	FaultStopApplier FaultKind = "stop-applier"
	// FaultStartApplier starts it again (StartApplier).
	FaultStartApplier FaultKind = "start-applier"
	// FaultStopReceiver stops a replica's receiving of changes: IO thread,
	// WAL receiver (StopReceiver).
	FaultStopReceiver FaultKind = "stop-receiver"
	// FaultStartReceiver starts it again (StartReceiver).
	FaultStartReceiver FaultKind = "start-receiver"
	// FaultApplyDelay sets a replica's SOURCE_DELAY (SetApplyDelay).
	FaultApplyDelay FaultKind = "apply-delay"
	// FaultPartition cuts a node off (Partition).
	FaultPartition FaultKind = "partition"
	// FaultHeal undoes FaultPartition (Heal).
	FaultHeal FaultKind = "heal"
	// FaultHeavy commits one heavy transaction on the primary
	// (HeavyTransaction).
	FaultHeavy FaultKind = "heavy"
	// FaultFailover promotes a replica (Failover).
	FaultFailover FaultKind = "failover"
)

// faultSpec is one kind's command-line shape and help.
type faultSpec struct {
	kind  FaultKind
	args  string // usage of the arguments after the kind
	help  string
	undo  FaultKind
	nargs int
}

var faultSpecs = []faultSpec{
	{FaultKill, "<node>", "stop without a clean shutdown (a dead node: no-op)", FaultRestart, 1},
	{FaultRestart, "<node>", "start again with the data kept", "", 1},
	{FaultPause, "<node>", "freeze the process (SIGSTOP, docker pause)", FaultResume, 1},
	{FaultResume, "<node>", "thaw it", "", 1},
	{FaultStopApplier, "<replica>", "stop the replica's SQL thread", FaultStartApplier, 1},
	{FaultStartApplier, "<replica>", "start it again", "", 1},
	{FaultStopReceiver, "<replica>", "stop the replica's receiving (IO thread, WAL receiver); it stays reachable", FaultStartReceiver, 1},
	{FaultStartReceiver, "<replica>", "start it again", "", 1},
	{FaultApplyDelay, "<replica> <s>", "set SOURCE_DELAY to s whole seconds (0 removes it)", FaultApplyDelay, 2},
	{FaultPartition, "<node>", "cut the node off (docker: network; local: IO threads, weaker)", FaultHeal, 1},
	{FaultHeal, "<node>", "undo partition", "", 1},
	{FaultHeavy, "<rows>", "one INSERT ... SELECT of <rows> rows on the primary", "", 1},
	{FaultFailover, "<replica>", "promote the replica; prints lost GTIDs and the new epoch", "", 1},
}

func specOf(k FaultKind) (faultSpec, bool) {
	for _, s := range faultSpecs {
		if s.kind == k {
			return s, true
		}
	}
	return faultSpec{}, false
}

// FaultKinds lists every kind, in the order FaultUsage shows them.
func FaultKinds() []FaultKind {
	out := make([]FaultKind, len(faultSpecs))
	for i, s := range faultSpecs {
		out[i] = s.kind
	}
	return out
}

// Valid reports whether k is one of FaultKinds.
func (k FaultKind) Valid() bool {
	_, ok := specOf(k)
	return ok
}

// Undoes returns the kind that undoes k (restart for kill, resume for pause,
// start-applier for stop-applier, heal for partition, apply-delay 0 for
// apply-delay), or "" when k has none (heavy, failover, and the undoing
// kinds themselves).
func (k FaultKind) Undoes() FaultKind {
	s, _ := specOf(k)
	return s.undo
}

// FaultUsage is the kinds' help: one line per kind with its arguments.
func FaultUsage() string {
	var b strings.Builder
	b.WriteString("Kinds:")
	for _, s := range faultSpecs {
		// Each help folded to 80 columns under itself.
		fmt.Fprintf(&b, "\n  %-27s", string(s.kind)+" "+s.args)
		n := 0
		for _, w := range strings.Fields(s.help) {
			if n > 0 && 30+n+1+len([]rune(w)) > 80 {
				fmt.Fprintf(&b, "\n%30s", "")
				n = 0
			} else if n > 0 {
				b.WriteByte(' ')
				n++
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(w)
			n += len([]rune(w))
		}
	}
	return b.String()
}

// ErrBadFault is returned (wrapped) by ParseFault for an unknown kind or
// bad arguments.
var ErrBadFault = errors.New("bad fault")

// Fault is one fault to inject.
type Fault struct {
	// Kind is the fault.
	Kind FaultKind
	// Node is the node's name (every kind but heavy).
	Node string
	// Delay is apply-delay's SOURCE_DELAY (whole seconds; 0 removes it).
	Delay time.Duration
	// Rows is heavy's row count.
	Rows int
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultHeavy:
		return fmt.Sprintf("%s %d", f.Kind, f.Rows)
	case FaultApplyDelay:
		return fmt.Sprintf("%s %s %d", f.Kind, f.Node, int(f.Delay/time.Second))
	}
	return string(f.Kind) + " " + f.Node
}

// Undo returns the fault that undoes f (see FaultKind.Undoes), and false
// when there is none.
func (f Fault) Undo() (Fault, bool) {
	u := f.Kind.Undoes()
	if u == "" {
		return Fault{}, false
	}
	return Fault{Kind: u, Node: f.Node}, true
}

// ParseFault parses `causallab fault`'s arguments: a kind and its
// arguments (FaultUsage). Errors wrap ErrBadFault and name what was wrong.
func ParseFault(args []string) (Fault, error) {
	if len(args) == 0 {
		return Fault{}, fmt.Errorf("%w: no kind", ErrBadFault)
	}
	k := FaultKind(args[0])
	s, ok := specOf(k)
	if !ok {
		return Fault{}, fmt.Errorf("%w: unknown kind %q", ErrBadFault, args[0])
	}
	if got := len(args) - 1; got != s.nargs {
		return Fault{}, fmt.Errorf("%w: %s takes %d argument(s) (%s), got %d", ErrBadFault, k, s.nargs, s.args, got)
	}
	f := Fault{Kind: k, Node: args[1]}
	switch k {
	case FaultHeavy:
		rows, err := strconv.Atoi(args[1])
		if err != nil || rows < 1 {
			return Fault{}, fmt.Errorf("%w: heavy %q: want a positive row count", ErrBadFault, args[1])
		}
		f.Node, f.Rows = "", rows
	case FaultApplyDelay:
		secs, err := strconv.Atoi(args[2])
		if err != nil || secs < 0 {
			return Fault{}, fmt.Errorf("%w: apply-delay %q: want whole non-negative seconds", ErrBadFault, args[2])
		}
		f.Delay = time.Duration(secs) * time.Second
	}
	return f, nil
}

// Injector is every fault a topology can take. *Topology has them all; an
// external topology refuses the process faults with ErrNotSupported.
type Injector interface {
	Kill(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) error
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	StopApplier(ctx context.Context, name string) error
	StartApplier(ctx context.Context, name string) error
	StopReceiver(ctx context.Context, name string) error
	StartReceiver(ctx context.Context, name string) error
	SetApplyDelay(ctx context.Context, name string, d time.Duration) error
	Partition(ctx context.Context, name string) (PartitionMode, error)
	Heal(ctx context.Context, name string) error
	HeavyTransaction(ctx context.Context, rows int) (HeavyResult, error)
	Failover(ctx context.Context, name string) (FailoverResult, error)
}

var _ Injector = (*Topology)(nil)

// FaultResult is what an injected fault reports beyond its error: set
// for the kinds that return something.
type FaultResult struct {
	// Partition is partition's mode.
	Partition PartitionMode
	// Heavy is heavy's result.
	Heavy HeavyResult
	// Failover is failover's result (valid when NewPrimary is set, even
	// with an error: the failover stands).
	Failover FailoverResult
}

// Inject carries f out on t.
func Inject(ctx context.Context, t Injector, f Fault) (FaultResult, error) {
	var r FaultResult
	var err error
	switch f.Kind {
	case FaultKill:
		err = t.Kill(ctx, f.Node)
	case FaultRestart:
		err = t.Restart(ctx, f.Node)
	case FaultPause:
		err = t.Pause(ctx, f.Node)
	case FaultResume:
		err = t.Resume(ctx, f.Node)
	case FaultStopApplier:
		err = t.StopApplier(ctx, f.Node)
	case FaultStartApplier:
		err = t.StartApplier(ctx, f.Node)
	case FaultStopReceiver:
		err = t.StopReceiver(ctx, f.Node)
	case FaultStartReceiver:
		err = t.StartReceiver(ctx, f.Node)
	case FaultApplyDelay:
		err = t.SetApplyDelay(ctx, f.Node, f.Delay)
	case FaultPartition:
		r.Partition, err = t.Partition(ctx, f.Node)
	case FaultHeal:
		err = t.Heal(ctx, f.Node)
	case FaultHeavy:
		r.Heavy, err = t.HeavyTransaction(ctx, f.Rows)
	case FaultFailover:
		r.Failover, err = t.Failover(ctx, f.Node)
	default:
		err = fmt.Errorf("%w: unknown kind %q", ErrBadFault, f.Kind)
	}
	return r, err
}

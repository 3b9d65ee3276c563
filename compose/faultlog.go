package compose

import (
	"context"
	"log/slog"
	"strings"
	"time"
)

// Log lines about faults this topology injected on purpose: a router or a
// position poller that finds a killed node logs a WARN with the driver's
// raw error ("io.ReadFull(header) failed ... connection was bad"), which
// a reader takes for a failure of the run. FaultLogger turns those into
// one INFO sentence per node and fault.

// injectedFault is a fault that took a node out on purpose.
type injectedFault struct {
	// what says it in words: "killed", "paused", "cut off the network".
	what string
	// seq tells one fault from the next on the same node (a flapping
	// replica): each gets its own INFO line.
	seq uint64
	// backAt is when the node came back (zero while it is out); errors
	// from connections that lived through the fault still arrive for
	// faultGrace after it.
	backAt time.Time
}

// faultGrace is how long after a node comes back its errors are still
// counted as the fault's (pooled connections that lived through it fail
// once, polls in flight time out).
const faultGrace = 3 * time.Second

// markOut records that node name is out on purpose (before the fault is
// injected: the first errors can arrive before the call returns); it
// returns the undo for a fault that failed.
func (t *Topology) markOut(name, what string) func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.injected == nil {
		t.injected = map[string]injectedFault{}
	}
	prev, had := t.injected[name]
	t.faultSeq++
	t.injected[name] = injectedFault{what: what, seq: t.faultSeq}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if had {
			t.injected[name] = prev
		} else {
			delete(t.injected, name)
		}
	}
}

// markBack records that node name is back (Restart, Resume, Heal).
func (t *Topology) markBack(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.injected[name]; ok && f.backAt.IsZero() {
		f.backAt = time.Now()
		t.injected[name] = f
	}
}

// outOnPurpose reports the fault that has node name (or address addr) out
// now, or came back less than faultGrace ago.
func (t *Topology) outOnPurpose(key string) (string, injectedFault, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.nodes {
		if key != n.Name && key != n.Addr() && key != peerAddr(n) {
			continue
		}
		f, ok := t.injected[n.Name]
		if !ok || (!f.backAt.IsZero() && time.Since(f.backAt) > faultGrace) {
			return "", injectedFault{}, false
		}
		return n.Name, f, true
	}
	return "", injectedFault{}, false
}

func peerAddr(n Node) string {
	if n.PeerHost == "" {
		return ""
	}
	return Node{Host: n.PeerHost, Port: n.PeerPort}.Addr()
}

// FaultLogger returns l with its WARN records about a node this topology
// took out on purpose (Kill, Pause, a network Partition; until faultGrace
// after Restart, Resume or Heal) turned into one INFO line in plain words
// per node, fault and message ("router: node marked down: primary was
// killed on purpose (an injected fault), as expected"). The original
// record, raw error and all, is logged at DEBUG (-v shows it). A record
// names its node by an attribute whose value is the node's name or
// address ("node", "primary", ...). Other records pass as they are.
func (t *Topology) FaultLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return slog.New(&faultHandler{h: l.Handler(), topo: t})
}

// faultHandler is FaultLogger's slog.Handler.
type faultHandler struct {
	h     slog.Handler
	topo  *Topology
	attrs []slog.Attr // from WithAttrs, to find the node in
}

func (f *faultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	// A WARN may become DEBUG and INFO: ask for the lowest.
	return f.h.Enabled(ctx, l) || (l == slog.LevelWarn && f.h.Enabled(ctx, slog.LevelDebug))
}

func (f *faultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *f
	c.h = f.h.WithAttrs(as)
	c.attrs = append(append([]slog.Attr(nil), f.attrs...), as...)
	return &c
}

func (f *faultHandler) WithGroup(name string) slog.Handler {
	c := *f
	c.h = f.h.WithGroup(name)
	return &c
}

func (f *faultHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level != slog.LevelWarn {
		return f.h.Handle(ctx, r)
	}
	node, fault, ok := f.find(r)
	if !ok {
		return f.h.Handle(ctx, r)
	}
	if f.h.Enabled(ctx, slog.LevelDebug) {
		d := r.Clone()
		d.Level = slog.LevelDebug
		if err := f.h.Handle(ctx, d); err != nil {
			return err
		}
	}
	if !f.topo.firstSaid(faultSaid{r.Message, node, fault.seq}) || !f.h.Enabled(ctx, slog.LevelInfo) {
		return nil
	}
	info := slog.NewRecord(r.Time, slog.LevelInfo, plainFaultMessage(r.Message, node, fault.what), r.PC)
	info.AddAttrs(slog.String("node", node))
	return f.h.Handle(ctx, info)
}

// faultSaid is one INFO line of FaultLogger's: a message about a node
// out on purpose, once per fault (every logger of the topology shares it:
// three routers that find the primary killed say so once).
type faultSaid struct {
	msg, node string
	seq       uint64
}

// firstSaid reports whether k is said for the first time.
func (t *Topology) firstSaid(k faultSaid) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.said == nil {
		t.said = map[faultSaid]bool{}
	}
	if t.said[k] {
		return false
	}
	t.said[k] = true
	return true
}

// find returns the node out on purpose that r (or the logger's attributes)
// names.
func (f *faultHandler) find(r slog.Record) (string, injectedFault, bool) {
	var node string
	var fault injectedFault
	var ok bool
	look := func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindString {
			node, fault, ok = f.topo.outOnPurpose(a.Value.String())
		}
		return !ok
	}
	for _, a := range f.attrs {
		if !look(a) {
			return node, fault, true
		}
	}
	r.Attrs(look)
	return node, fault, ok
}

// plainFaultMessage is msg said of a node out on purpose: "router: node
// marked down" becomes "router: node marked down: primary was killed on
// purpose (an injected fault), as expected".
func plainFaultMessage(msg, node, what string) string {
	return strings.TrimSuffix(msg, ".") + ": " + node + " was " + what + " on purpose (an injected fault), as expected"
}

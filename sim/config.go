package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// World names a replication world of the specification.
type World string

const (
	// WorldInstant: replication takes zero time (the control).
	WorldInstant World = "instant"
	// WorldIdentical: equal, healthy replicas.
	WorldIdentical World = "identical"
	// WorldStraggler: one replica is slower and stalls now and then.
	WorldStraggler World = "straggler"
	// WorldStragglerHeavy: straggler plus heavy records that every replica
	// replays for seconds (the default).
	WorldStragglerHeavy World = "straggler+heavy"
)

// Workload names the shape of the offered reads (the write stream is the
// same under both).
type Workload string

const (
	// WorkloadChains: each write is followed by its own chain of
	// ReadsPerWrite sequential reads; chains of the same session run
	// independently, so a session can have several reads in flight, and a
	// read's "last write" is the session's latest acknowledged write before
	// it. With 800 sessions this is the published demo's workload (its window
	// dial is reproduced within a point; docs/sim.md). The default.
	WorkloadChains Workload = "chains"
	// WorkloadQueue: a session's reads form one FIFO queue: a write's reads
	// wait until the session's earlier writes' reads are done. With 10,000
	// sessions (its default) this is the simulator's earlier default; the
	// lab's driver issues reads this way, so its predictions use it.
	WorkloadQueue Workload = "queue"
)

// Workloads lists the workload shapes.
var Workloads = []Workload{WorkloadChains, WorkloadQueue}

// ParseWorkload checks a workload name.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range Workloads {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("sim: unknown workload %q (want chains or queue)", s)
}

// defaultSessions is the session count a workload shape takes when none is
// given: 800 for chains (the demo's), 10,000 for queue (the earlier default).
func (w Workload) defaultSessions() int {
	if w == WorkloadQueue {
		return 10000
	}
	return 800
}

// Worlds lists every world in the order tables print them.
var Worlds = []World{WorldInstant, WorldIdentical, WorldStraggler, WorldStragglerHeavy}

// ParseWorld checks a world name.
func ParseWorld(s string) (World, error) {
	for _, w := range Worlds {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("sim: unknown world %q (want one of instant, identical, straggler, straggler+heavy)", s)
}

// ReplicaModel holds the calibrated replica parameters of a world. They are
// inputs chosen so the achieved lag lands near the specification's targets
// (docs/sim.md shows the calibration); violation rates and primary shares are
// never fitted.
type ReplicaModel struct {
	// ShipDelay is the mean time from commit on the primary to the record
	// reaching a replica's relay log.
	ShipDelay time.Duration
	// ShipJitter is the half-width of the uniform jitter around ShipDelay
	// (arrivals stay in log order).
	ShipJitter time.Duration
	// ApplyCost is a healthy replica's serial apply time per ordinary record.
	ApplyCost time.Duration
	// Straggler is true when replica 0 is the straggler.
	Straggler bool
	// SlowFactor multiplies the straggler's apply costs.
	SlowFactor float64
	// StragglerDelay is added to the straggler's ship delay (it sits further
	// from the primary): a standing lag under its stalls.
	StragglerDelay time.Duration
	// ReplicaDelay, when set, adds ReplicaDelay[r] to replica r's ship
	// delay (replicas beyond its length get none): a standing lag per
	// replica, as MySQL's SOURCE_DELAY gives. The lab's staggered
	// condition is predicted with the delays it measured.
	ReplicaDelay []time.Duration
	// StallEvery is the mean time between the straggler's stalls (Poisson).
	StallEvery time.Duration
	// StallMean is the mean stall length (uniform in [0.5, 1.5]×StallMean).
	StallMean time.Duration
	// HeavyProb is the share of writes that are heavy records. They are
	// spaced regularly, one every 1/HeavyProb writes from the trial's phase
	// (heavyPhase), so their number per trial is fixed by the rate (a trial
	// of n writes holds n×HeavyProb of them, ±1). Used when HeavyShare is 0.
	HeavyProb float64
	// HeavyShare, when > 0, puts heavy records on a time schedule instead of
	// HeavyProb: one every heavyCost/HeavyShare of offered time, regular
	// from the trial's phase, so replaying them takes HeavyShare of every
	// replica's time at any load, like a throttled batch job with a fixed
	// duty cycle (it sleeps in proportion to each batch's run time). The
	// heavy record is the first write sent at or after each scheduled time.
	HeavyShare float64
	// HeavyCost is a heavy record's replay time on every replica (the
	// straggler's factor does not apply to it), unless HeavyCostByLoad is
	// set.
	HeavyCost time.Duration
	// HeavyJitter spreads a heavy record's replay time across replicas:
	// each replica replays it in HeavyCost × (1 + HeavyJitter × u), u
	// uniform on [-1, 1] and drawn per replica (0: every replica takes
	// HeavyCost, in lockstep). In [0, 1).
	HeavyJitter float64
	// HeavyCostByLoad, when non-nil, gives a heavy record's replay time by
	// the offered write rate instead of HeavyCost: a batch job's statements
	// grow with the traffic they process. Points are interpolated linearly
	// and held flat beyond the first and last.
	HeavyCostByLoad *LoadCurve
}

// LoadCurve is a cost by offered write rate: points sorted by rate.
type LoadCurve []LoadPoint

// LoadPoint is one point of a LoadCurve.
type LoadPoint struct {
	WritesPerSec float64
	Cost         time.Duration
}

// at interpolates the curve at wps.
func (c LoadCurve) at(wps float64) time.Duration {
	if len(c) == 0 {
		return 0
	}
	if wps <= c[0].WritesPerSec {
		return c[0].Cost
	}
	for i := 1; i < len(c); i++ {
		if wps <= c[i].WritesPerSec {
			a, b := c[i-1], c[i]
			f := (wps - a.WritesPerSec) / (b.WritesPerSec - a.WritesPerSec)
			return a.Cost + time.Duration(f*float64(b.Cost-a.Cost))
		}
	}
	return c[len(c)-1].Cost
}

func (c LoadCurve) validate() error {
	for i, p := range c {
		if p.WritesPerSec < 0 || p.Cost < 0 || (i > 0 && p.WritesPerSec <= c[i-1].WritesPerSec) {
			return fmt.Errorf("heavy cost curve point %d %+v: want rates increasing, costs not negative", i, p)
		}
	}
	return nil
}

// hasHeavy reports whether the model has heavy records at all.
func (m *ReplicaModel) hasHeavy() bool { return m.HeavyProb > 0 || m.HeavyShare > 0 }

// heavyCost is a heavy record's replay time at wps offered writes/s.
func (m *ReplicaModel) heavyCost(wps float64) usec {
	if m.HeavyCostByLoad != nil {
		return dur(m.HeavyCostByLoad.at(wps))
	}
	return dur(m.HeavyCost)
}

// Model returns the calibrated replica model of world w (docs/sim.md,
// "Worlds", shows the calibration against the specification's targets).
func (w World) Model() ReplicaModel {
	healthy := ReplicaModel{
		ShipDelay:  10 * time.Millisecond,
		ShipJitter: 3 * time.Millisecond,
		ApplyCost:  300 * time.Microsecond,
	}
	switch w {
	case WorldInstant:
		return ReplicaModel{}
	case WorldIdentical:
		return healthy
	case WorldStraggler:
		m := healthy
		m.Straggler = true
		m.SlowFactor = 1.35
		m.StragglerDelay = 120 * time.Millisecond
		m.StallEvery = 1500 * time.Millisecond
		m.StallMean = 400 * time.Millisecond
		return m
	default:
		m := WorldStraggler.Model()
		m.HeavyShare = 0.20
		m.HeavyCostByLoad = &heavyCostByLoad
		return m
	}
}

// heavyCostByLoad is the calibrated heavy record's replay time by offered
// load: a batch job's statement grows with the traffic until its batch
// limit caps it.
var heavyCostByLoad = LoadCurve{
	{200, 530 * time.Millisecond},
	{600, 2100 * time.Millisecond},
	{1200, 5300 * time.Millisecond},
	{1600, 6400 * time.Millisecond},
	{2000, 6970 * time.Millisecond},
}

// Fault is an outage of one replica: it is down for the router (not
// selectable) and its applier is paused from From to To.
type Fault struct {
	// Replica is the index of the replica that goes down.
	Replica int
	// From is when it goes down, since trial start.
	From time.Duration
	// To is when it comes back.
	To time.Duration
}

// Drift is outside load on one replica (another client's reads), seen by the
// router as in-flight reads: the load balancer's target weights drift.
type Drift struct {
	// Replica carries the outside load.
	Replica int
	// InFlight is the number of outside reads in flight on it.
	InFlight int
	// From, To bound the drift in trial time.
	From, To time.Duration
}

// Config is one simulation run's setup. Zero fields take defaults in validate.
type Config struct {
	// Seed selects every random draw; trial i uses streams derived from
	// (Seed, i). Default 1.
	Seed uint64
	// Trials is the number of independent trials. Default 16.
	Trials int
	// Replicas is the fleet size. Default 5.
	Replicas int
	// WritesPerSec is the offered write rate (Poisson). Default 600.
	WritesPerSec float64
	// Workload is the shape of the offered reads. Default WorkloadChains.
	Workload Workload
	// Sessions is the number of sessions writes are spread over (uniformly).
	// Default 800 under WorkloadChains, 10000 under WorkloadQueue.
	Sessions int
	// Duration is how long writes are offered per trial; the reads that follow
	// are completed and counted. Default 16s.
	Duration time.Duration
	// ReadsPerWrite is the number of sequential reads after each write.
	// Default 3.
	ReadsPerWrite int
	// GapMin and GapMax bound the log-uniform think time before each read.
	// Defaults 15ms and 4s.
	GapMin, GapMax time.Duration
	// RTT is the client-to-node round trip. Default 4ms.
	RTT time.Duration
	// ReadService is a read's service time on any node. Default 1ms.
	ReadService time.Duration
	// PrimaryCapacity is the primary FIFO's rate in ops/s. Default 4000.
	PrimaryCapacity float64
	// Contention puts primary-bound reads in the write FIFO.
	Contention bool
	// World is the replication world. Default straggler+heavy.
	World World
	// Model overrides World.Model() when non-nil.
	Model *ReplicaModel
	// Poll is the router view's polling period; 0 is a perfect, instant view.
	Poll time.Duration
	// Cap is the primary fallback cap (PerSecond 0: no cap).
	Cap router.Cap
	// Weights are the replicas' hashing weights for the affinity policy,
	// in order (as ProxySQL's hostgroup weights); empty: every replica 1,
	// otherwise one per replica, 1..hashroute.MaxWeight.
	Weights []int
	// Faults are replica outages.
	Faults []Fault
	// Drifts are outside-load periods.
	Drifts []Drift
	// Spikes pause every replica's applier (the replicas stay up for the
	// router): a fleet-wide lag spike, as after a heavy migration.
	Spikes []Spike
}

// Spike pauses every replica's applier from From to To (trial time).
type Spike struct {
	From, To time.Duration
}

// validate fills defaults and rejects nonsense.
func (c *Config) validate() error {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Trials == 0 {
		c.Trials = 16
	}
	if c.Replicas == 0 {
		c.Replicas = 5
	}
	if c.WritesPerSec == 0 {
		c.WritesPerSec = 600
	}
	if c.Workload == "" {
		c.Workload = WorkloadChains
	}
	if c.Sessions == 0 {
		c.Sessions = c.Workload.defaultSessions()
	}
	if c.Duration == 0 {
		c.Duration = 16 * time.Second
	}
	if c.ReadsPerWrite == 0 {
		c.ReadsPerWrite = 3
	}
	if c.GapMin == 0 {
		c.GapMin = 15 * time.Millisecond
	}
	if c.GapMax == 0 {
		c.GapMax = 4 * time.Second
	}
	if c.RTT == 0 {
		c.RTT = 4 * time.Millisecond
	}
	if c.ReadService == 0 {
		c.ReadService = time.Millisecond
	}
	if c.PrimaryCapacity == 0 {
		c.PrimaryCapacity = 4000
	}
	if c.World == "" {
		c.World = WorldStragglerHeavy
	}
	var errs []error
	if c.Trials < 0 || c.Trials > 100000 {
		errs = append(errs, fmt.Errorf("trials %d: want 1..100000", c.Trials))
	}
	if c.Replicas < 1 || c.Replicas > 64 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1..64", c.Replicas))
	}
	if c.WritesPerSec < 0 || c.WritesPerSec > 100000 {
		errs = append(errs, fmt.Errorf("writes-per-sec %g: want 0..100000", c.WritesPerSec))
	}
	if c.Sessions < 1 || c.Sessions > 1<<24 {
		errs = append(errs, fmt.Errorf("sessions %d: want 1..16777216", c.Sessions))
	}
	if c.Duration < time.Millisecond || c.Duration > time.Hour {
		errs = append(errs, fmt.Errorf("duration %v: want 1ms..1h", c.Duration))
	}
	if c.ReadsPerWrite < 0 || c.ReadsPerWrite > 100 {
		errs = append(errs, fmt.Errorf("reads-per-write %d: want 0..100", c.ReadsPerWrite))
	}
	if c.GapMin <= 0 || c.GapMax < c.GapMin {
		errs = append(errs, fmt.Errorf("gaps [%v, %v]: want 0 < min <= max", c.GapMin, c.GapMax))
	}
	if c.RTT < 0 || c.ReadService < 0 {
		errs = append(errs, errors.New("rtt and read service must not be negative"))
	}
	if c.PrimaryCapacity < 0 {
		errs = append(errs, fmt.Errorf("primary capacity %g: must be positive", c.PrimaryCapacity))
	}
	if _, err := ParseWorld(string(c.World)); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseWorkload(string(c.Workload)); err != nil {
		errs = append(errs, err)
	}
	if c.Poll < 0 {
		errs = append(errs, fmt.Errorf("poll %v: must not be negative", c.Poll))
	}
	if len(c.Weights) > 0 && len(c.Weights) != c.Replicas {
		errs = append(errs, fmt.Errorf("%d weights for %d replicas", len(c.Weights), c.Replicas))
	}
	for i, w := range c.Weights {
		if w < 1 || w > hashroute.MaxWeight {
			errs = append(errs, fmt.Errorf("weight %d of replica %d: want 1..%d", w, i, hashroute.MaxWeight))
		}
	}
	for _, f := range c.Faults {
		if f.Replica < 0 || f.Replica >= c.Replicas || f.To < f.From || f.From < 0 {
			errs = append(errs, fmt.Errorf("fault %+v: replica out of range or empty interval", f))
		}
	}
	for _, s := range c.Spikes {
		if s.From < 0 || s.To < s.From {
			errs = append(errs, fmt.Errorf("spike %+v: empty or negative interval", s))
		}
	}
	for _, d := range c.Drifts {
		if d.Replica < 0 || d.Replica >= c.Replicas || d.To < d.From || d.InFlight < 0 {
			errs = append(errs, fmt.Errorf("drift %+v: replica out of range or bad interval", d))
		}
	}
	if c.Model != nil {
		m := c.Model
		if m.ShipDelay < 0 || m.ShipJitter < 0 || m.ShipJitter > m.ShipDelay || m.ApplyCost < 0 || m.StragglerDelay < 0 ||
			m.HeavyProb < 0 || m.HeavyProb > 1 || m.HeavyShare < 0 || m.HeavyShare >= 1 || m.HeavyCost < 0 || m.HeavyJitter < 0 || m.HeavyJitter >= 1 || (m.Straggler && m.SlowFactor <= 0) {
			errs = append(errs, fmt.Errorf("replica model %+v: negative or inconsistent", *m))
		}
		for r, d := range m.ReplicaDelay {
			if d < 0 || d > time.Hour {
				errs = append(errs, fmt.Errorf("replica model: replica %d delay %v out of range 0..1h", r, d))
			}
		}
		if m.HeavyCostByLoad != nil {
			if err := m.HeavyCostByLoad.validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (c *Config) model() ReplicaModel {
	if c.Model != nil {
		return *c.Model
	}
	return c.World.Model()
}

// RouterSpec names one routing rule to run.
type RouterSpec struct {
	// Name labels the rule in tables.
	Name string
	// Policy is handed to router.Decide unchanged.
	Policy router.Policy
}

func dur(d time.Duration) usec { return usec(d / time.Microsecond) }

// Validate checks o as every experiment would, before any runs: Base's
// fields against Config's limits (zero fields take defaults), and the
// window and wait budget (zero: the defaults; negative or above
// router.MaxDuration: an error). A command line is checked with it before
// work starts.
func (o Options) Validate() error {
	c := o.Base
	errs := []error{c.validate()}
	if o.Window < 0 || o.Window > router.MaxDuration {
		errs = append(errs, fmt.Errorf("window %v: want 0 (the default) .. %v", o.Window, router.MaxDuration))
	}
	if o.WaitBudget < 0 || o.WaitBudget > router.MaxDuration {
		errs = append(errs, fmt.Errorf("wait budget %v: want 0 (the default) .. %v", o.WaitBudget, router.MaxDuration))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

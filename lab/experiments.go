package lab

import (
	"context"
	"fmt"
)

// Topology is what every experiment needs: nodes and faults.
// *compose.Topology has it; so does an external topology attached with
// compose's external backend (with fewer faults).
type Topology = Faults

// RoutersOptions configure `lab routers`.
type RoutersOptions struct {
	// Config is the workload; Routers default to DefaultRouters() and the
	// condition to straggler+heavy (the simulator's default world).
	Config Config
	// NoPredict skips the simulator's prediction.
	NoPredict bool
	// Predict tunes the prediction.
	Predict PredictOptions
}

// Routers runs the six routers (or cfg.Routers) on the live topology and
// puts the simulator's prediction beside each row.
func Routers(ctx context.Context, topo Topology, o RoutersOptions) (*Result, error) {
	cfg := o.Config
	if len(cfg.Routers) == 0 {
		cfg.Routers = DefaultRouters()
	}
	if len(cfg.Condition.Names) == 0 {
		c, err := ParseCondition("straggler+heavy")
		if err != nil {
			return nil, err
		}
		cfg.Condition = c
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res.Experiment = "routers"
	if !o.NoPredict {
		if err := Predict(ctx, res, cfg.Condition, len(topo.Replicas()), cfg.Routers, o.Predict); err != nil {
			return nil, fmt.Errorf("lab routers: %w", err)
		}
	}
	return res, nil
}

package lab

import (
	"os"
	"testing"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// topo is the package's one shared topology (nil under -short).
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Replicas: 3}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

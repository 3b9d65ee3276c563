package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/causallab/causallab/hashroute"
)

// TestConfigHashModeAndWeights: affinity's hash mode and the replicas'
// weights are configurable, defaulted and checked.
func TestConfigHashModeAndWeights(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "proxy.yaml")
	yaml := `users: [{name: app, password: app}]
primary: {addr: "127.0.0.1:3306"}
replicas:
  - {addr: "127.0.0.1:3307", weight: 3}
  - {addr: "127.0.0.1:3308"}
policy: affinity
hash_mode: available-only
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if s.policy.HashMode != hashroute.AvailableOnly || s.cfg.Replicas[0].Weight != 3 || s.cfg.Replicas[1].Weight != 1 {
		t.Fatalf("policy %+v, replicas %+v", s.policy, s.cfg.Replicas)
	}
	good := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			Replicas: []Backend{{Addr: "127.0.0.1:3307"}}}
	}
	for name, mut := range map[string]func(*Config){
		"hash mode":       func(c *Config) { c.HashMode = "consistent" },
		"negative weight": func(c *Config) { c.Replicas[0].Weight = -1 },
		"huge weight":     func(c *Config) { c.Replicas[0].Weight = hashroute.MaxWeight + 1 },
	} {
		c := good()
		mut(&c)
		err := c.validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), "hash_mode") && !strings.Contains(err.Error(), "weight") {
			t.Errorf("%s: %v does not name the field", name, err)
		}
	}
}

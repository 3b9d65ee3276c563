package proxy

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
)

// topologyNode is the part of a compose node's JSON form (compose.Node)
// the proxy reads. The proxy does not import compose (which links the
// Docker client); TestConfigFromTopologyReadsComposeNodes keeps the two
// forms in step.
type topologyNode struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	User     string `json:"user"`
	Password string `json:"password"`
	// Engine is compose's engine name ("" for MySQL).
	Engine string `json:"engine"`
}

// ConfigFromTopology reads a compose topology file (see
// ConfigFromTopologyJSON) into a Config's backends.
func ConfigFromTopology(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("proxy: topology: %w", err)
	}
	cfg, err := ConfigFromTopologyJSON(b)
	if err != nil {
		return Config{}, fmt.Errorf("proxy: topology %s: %w", path, err)
	}
	return cfg, nil
}

// ConfigFromTopologyJSON maps a compose topology to the proxy's backends:
// b is a JSON list of compose nodes, or an object with a "nodes" list (the
// state file `causallab up` writes). The node with role primary becomes
// Primary, the nodes with role replica become Replicas in file order, and
// retired nodes are left out. Only the backends, their engine (the nodes'
// "engine": mariadb, else mysql; a PostgreSQL node is an error, the proxy
// speaks the MySQL protocol) and, from a state file, the topology's epoch
// (compose numbers epochs as the proxy does, from 1) are set; the caller
// adds users and the rest.
func ConfigFromTopologyJSON(b []byte) (Config, error) {
	var nodes []topologyNode
	var epoch uint64
	if err := json.Unmarshal(b, &nodes); err != nil {
		var wrapped struct {
			Nodes []topologyNode `json:"nodes"`
			Epoch uint64         `json:"epoch"`
		}
		if err2 := json.Unmarshal(b, &wrapped); err2 != nil {
			return Config{}, err
		}
		nodes, epoch = wrapped.Nodes, wrapped.Epoch
	}
	cfg := Config{Epoch: epoch, Engine: EngineMySQL}
	for i, n := range nodes {
		eng := n.Engine
		switch {
		case eng == "":
			eng = EngineMySQL
		case eng != EngineMySQL && eng != EngineMariaDB:
			return Config{}, fmt.Errorf("node %s runs %s: the proxy fronts MySQL and MariaDB", n.Name, eng)
		}
		if i > 0 && eng != cfg.Engine {
			return Config{}, fmt.Errorf("node %s runs %s, %s runs %s: one engine per topology", n.Name, eng, nodes[0].Name, cfg.Engine)
		}
		cfg.Engine = eng
		be := Backend{Name: n.Name, Addr: net.JoinHostPort(n.Host, strconv.Itoa(n.Port)), User: n.User, Password: n.Password}
		switch n.Role {
		case "primary":
			if cfg.Primary.Addr != "" {
				return Config{}, fmt.Errorf("two primaries (%s, %s)", cfg.Primary.Name, n.Name)
			}
			cfg.Primary = be
		case "replica":
			cfg.Replicas = append(cfg.Replicas, be)
		}
	}
	if cfg.Primary.Addr == "" {
		return Config{}, fmt.Errorf("no node with role primary among %d nodes", len(nodes))
	}
	return cfg, nil
}

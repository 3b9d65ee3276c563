package proxy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
)

// TestConfigFromTopologyReadsComposeNodes: the proxy reads compose's own
// JSON forms (a node list, and the state file's object), after a failover
// too (a retired old primary is left out).
func TestConfigFromTopologyReadsComposeNodes(t *testing.T) {
	nodes := []compose.Node{
		{Name: "primary", Role: compose.RoleRetired, Host: "127.0.0.1", Port: 4000, User: "u", Password: "p"},
		{Name: "replica1", Role: compose.RolePrimary, Host: "127.0.0.1", Port: 4001, User: "u", Password: "p"},
		{Name: "replica2", Role: compose.RoleReplica, Host: "::1", Port: 4002, User: "u", Password: "p"},
		{Name: "replica3", Role: compose.RoleReplica, Host: "127.0.0.1", Port: 4003, User: "v", Password: "q"},
	}
	want := Config{
		Engine:  EngineMySQL,
		Primary: Backend{Name: "replica1", Addr: nodes[1].Addr(), User: "u", Password: "p"},
		Replicas: []Backend{
			{Name: "replica2", Addr: nodes[2].Addr(), User: "u", Password: "p"},
			{Name: "replica3", Addr: nodes[3].Addr(), User: "v", Password: "q"},
		},
	}
	list, _ := json.Marshal(nodes)
	state, _ := json.Marshal(compose.State{Version: compose.StateVersion, Backend: compose.BackendLocal, Nodes: nodes, Epoch: 2})
	for name, b := range map[string][]byte{"node list": list, "state file": state} {
		got, err := ConfigFromTopologyJSON(b)
		want := want
		if name == "state file" {
			want.Epoch = 2 // the topology's, as status prints it
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v\nwant %+v", name, got, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "topology.json")
	if err := os.WriteFile(path, state, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ConfigFromTopology(path); err != nil || got.Epoch != 2 || !reflect.DeepEqual(got.Replicas, want.Replicas) {
		t.Errorf("file: %+v, %v", got, err)
	}
}

func TestConfigFromTopologyErrors(t *testing.T) {
	for in, want := range map[string]string{
		`[{"name":"a","role":"replica","host":"h","port":1}]`:                             "no node with role primary",
		`[{"name":"a","role":"primary","port":1},{"name":"b","role":"primary","port":2}]`: "two primaries (a, b)",
		`{"nodes": 3}`: "cannot unmarshal",
		`[{"name":"a","role":"primary","port":1,"engine":"postgres"}]`:                      "node a runs postgres: the proxy fronts MySQL and MariaDB",
		`[{"name":"a","role":"primary","port":1,"engine":"mariadb"},{"name":"b","port":2}]`: "node b runs mysql, a runs mariadb",
		`not json`: "invalid character",
	} {
		_, err := ConfigFromTopologyJSON([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
	if c, err := ConfigFromTopologyJSON([]byte(`[{"name":"a","role":"primary","port":1,"engine":"mariadb"},{"name":"b","role":"replica","port":2,"engine":"mariadb"}]`)); err != nil || c.Engine != EngineMariaDB {
		t.Errorf("a MariaDB topology: engine %q, %v", c.Engine, err)
	}
	_, err := ConfigFromTopology(filepath.Join(t.TempDir(), "none.json"))
	if err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing file: %v", err)
	}
}

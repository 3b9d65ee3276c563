package compose_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// TestClientCommand: the engine's client from the topology's own software
// (chrooted into the root filesystem, or docker exec / docker run), on a
// node by name and on an address (what `causallab mysql proxy` uses).
func TestClientCommand(t *testing.T) {
	composetest.Need(t, shared)
	run := func(t *testing.T, o compose.ClientOptions) string {
		t.Helper()
		cmd, err := shared.ClientCommand(o)
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, errb.String())
		}
		if strings.Contains(errb.String(), "password on the command line") {
			t.Errorf("the password went on the command line: %s", errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got := run(t, compose.ClientOptions{Node: "replica2", Args: []string{"-N", "-e", "SELECT @@server_id"}}); got != "3" {
		t.Errorf("replica2's server_id = %q, want 3", got)
	}
	p := shared.Primary()
	if got := run(t, compose.ClientOptions{Addr: p.Addr(), User: p.User, Password: p.Password, Args: []string{"-N", "-e", "SELECT @@server_id"}}); got != "1" {
		t.Errorf("the primary by address: server_id %q, want 1", got)
	}
	if _, err := shared.ClientCommand(compose.ClientOptions{Node: "replica7"}); err == nil || !strings.Contains(err.Error(), "unknown node") {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := shared.ClientCommand(compose.ClientOptions{Addr: "127.0.0.1"}); err == nil {
		t.Error("an address without a port was accepted")
	}
}

// TestDockerContainerNames: docker containers are named after their node
// and their topology (causallab-<id>-<node>), so that two topologies never
// collide.
func TestDockerContainerNames(t *testing.T) {
	composetest.Need(t, shared)
	if shared.Backend() != compose.BackendDocker {
		t.Skip("docker backend only (make test-docker)")
	}
	b, _ := json.Marshal(shared.State())
	var st struct {
		Internal struct {
			Docker struct {
				Servers []struct{ Name, ID string }
			} `json:"docker"`
		} `json:"internal"`
	}
	if err := json.Unmarshal(b, &st); err != nil || len(st.Internal.Docker.Servers) != 3 {
		t.Fatalf("state: %v: %s", err, b)
	}
	ids := map[string]bool{}
	for _, s := range st.Internal.Docker.Servers {
		out, err := exec.Command("docker", "inspect", "-f", "{{.Name}} {{index .Config.Labels \"causallab.topology\"}}", s.ID).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", s.ID, err)
		}
		name, id, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		if want := "/causallab-" + id + "-" + s.Name; name != want || len(id) != 8 {
			t.Errorf("container of %s is %q (topology %q), want %q", s.Name, name, id, want)
		}
		ids[id] = true
	}
	if len(ids) != 1 {
		t.Errorf("one topology's containers carry %d identities: %v", len(ids), ids)
	}
}

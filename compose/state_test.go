package compose

import (
	"encoding/json"
	"strings"
	"testing"
)

func sampleState() State {
	return State{Version: StateVersion, Backend: BackendLocal, Epoch: 2,
		Nodes: []Node{
			{Name: "primary", Role: RoleRetired, Host: "127.0.0.1", Port: 4000, User: "u", Password: "p", PeerHost: "127.0.0.1", PeerPort: 4000},
			{Name: "replica1", Role: RolePrimary, Host: "127.0.0.1", Port: 4001, User: "u", Password: "p", PeerHost: "127.0.0.1", PeerPort: 4001},
		},
		Internal: backendState{Local: &localState{Chroot: "/r", Mysqld: "/usr/sbin/mysqld", HostDir: "/r/tmp/causallab-1", InDir: "/tmp/causallab-1",
			Servers: []localServerState{{Name: "primary", ServerID: 1, Port: 4000, Pid: 10}, {Name: "replica1", ServerID: 2, Port: 4001, Pid: 11}}}},
	}
}

// roundTrip marshals st and parses it back: the parsed state and the
// JSON it was parsed from.
func roundTrip(t *testing.T, st State) (State, []byte) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseState(b)
	if err != nil {
		t.Fatal(err)
	}
	return got, b
}

func TestStateRoundTrip(t *testing.T) {
	got, b := roundTrip(t, sampleState())
	b2, _ := json.Marshal(got)
	if string(b) != string(b2) {
		t.Fatalf("round trip changed the state:\n%s\n%s", b, b2)
	}
}

// A version-1 state file counted epochs from 0: it reads as version 2 with
// one more (the topology's epoch is the one its tokens carry).
func TestParseStateVersion1Epoch(t *testing.T) {
	for v1, want := range map[uint64]uint64{0: FirstEpoch, 1: FirstEpoch + 1, 4: FirstEpoch + 4} {
		st := sampleState()
		st.Version, st.Epoch = 1, v1
		b, _ := json.Marshal(st)
		got, err := ParseState(b)
		if err != nil || got.Version != StateVersion || got.Epoch != want {
			t.Errorf("version 1, epoch %d: got version %d epoch %d, %v; want epoch %d", v1, got.Version, got.Epoch, err, want)
		}
	}
}

func TestParseStateRejects(t *testing.T) {
	good, _ := json.Marshal(sampleState())
	cases := map[string]struct {
		edit func(*State)
		raw  string
		want string
	}{
		"not json":        {raw: "{", want: "bad state file"},
		"unknown field":   {raw: strings.Replace(string(good), `"epoch"`, `"bogus":1,"epoch"`, 1), want: "unknown field"},
		"version":         {edit: func(s *State) { s.Version = 99 }, want: "version 99"},
		"epoch 0":         {edit: func(s *State) { s.Epoch = 0 }, want: "epoch 0 (epochs begin at 1)"},
		"backend":         {edit: func(s *State) { s.Backend = "vm" }, want: `backend "vm"`},
		"no nodes":        {edit: func(s *State) { s.Nodes = nil }, want: "0 nodes"},
		"two primaries":   {edit: func(s *State) { s.Nodes[0].Role = RolePrimary }, want: "2 primaries"},
		"repeated name":   {edit: func(s *State) { s.Nodes[1].Name = "primary" }, want: "repeated"},
		"bad port":        {edit: func(s *State) { s.Nodes[1].Port = 70000 }, want: "port 70000"},
		"bad role":        {edit: func(s *State) { s.Nodes[1].Role = "boss" }, want: `role "boss"`},
		"process table":   {edit: func(s *State) { s.Internal.Local.Servers = s.Internal.Local.Servers[:1] }, want: "process table"},
		"docker missing":  {edit: func(s *State) { s.Backend = BackendDocker }, want: "container table"},
		"pending primary": {edit: func(s *State) { s.PendingRepoint = map[string]string{"replica1": "paused"} }, want: `pending repoint of "replica1"`},
		"pending unknown": {edit: func(s *State) { s.PendingRepoint = map[string]string{"replica7": "down"} }, want: `pending repoint of "replica7"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := []byte(tc.raw)
			if tc.edit != nil {
				st := sampleState()
				tc.edit(&st)
				b, _ = json.Marshal(st)
			}
			_, err := ParseState(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParseState(f *testing.F) {
	good, _ := json.Marshal(sampleState())
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"version":1,"backend":"external","nodes":[{"name":"primary","role":"primary","port":1}],"internal":{}}`))
	f.Add([]byte(`{"version":1,"backend":"docker","nodes":[],"internal":{"docker":{"servers":[]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState(b)
		if err != nil {
			return
		}
		// What parses must satisfy the invariants and survive a round trip.
		primaries := 0
		for _, n := range st.Nodes {
			if n.Role == RolePrimary {
				primaries++
			}
		}
		if primaries != 1 {
			t.Fatalf("accepted %d primaries", primaries)
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseState(again); err != nil {
			t.Fatalf("re-parse of accepted state: %v", err)
		}
	})
}

func FuzzParseNodeDSN(f *testing.F) {
	for _, s := range []string{"u:p@tcp(127.0.0.1:3306)/", "u@tcp([::1]:1)/db", "u:p@unix(/tmp/s)/", "tcp(:0)/", "", "u:p@tcp(h:99999)/", "u:p@tcp(h)/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		n, err := parseNodeDSN("replica1", RoleReplica, dsn)
		if err != nil {
			return
		}
		if n.Port < 1 || n.Port > 65535 || n.Name != "replica1" || n.Role != RoleReplica {
			t.Fatalf("accepted %+v from %q", n, dsn)
		}
	})
}

func TestStatePendingRepointRoundTrip(t *testing.T) {
	st := sampleState()
	st.Nodes = append(st.Nodes, Node{Name: "replica2", Role: RoleReplica, Host: "127.0.0.1", Port: 4002, User: "u", Password: "p", PeerHost: "127.0.0.1", PeerPort: 4002})
	st.Internal.Local.Servers = append(st.Internal.Local.Servers, localServerState{Name: "replica2", ServerID: 3, Port: 4002, Pid: 12})
	st.PendingRepoint = map[string]string{"replica2": "paused"}
	got, _ := roundTrip(t, st)
	if got.PendingRepoint["replica2"] != "paused" || len(got.PendingRepoint) != 1 {
		t.Fatalf("pending repoints after round trip: %v", got.PendingRepoint)
	}
}

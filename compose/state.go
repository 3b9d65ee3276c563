package compose

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// backendState is what another process needs to find a backend's servers
// again (the CLI's state file).
type backendState struct {
	// Local is set for the local backend.
	Local *localState `json:"local,omitempty"`
	// Docker is set for the docker backend.
	Docker *dockerState `json:"docker,omitempty"`
}

// dockerState records a docker topology.
type dockerState struct {
	NetworkID string              `json:"network_id"`
	Network   string              `json:"network"`
	Servers   []dockerServerState `json:"servers"`
}

type dockerServerState struct {
	Name     string `json:"name"`
	ServerID int    `json:"server_id"`
	HostPort int    `json:"host_port"`
	ID       string `json:"id"`
}

// localState records a local topology.
type localState struct {
	Chroot  string             `json:"chroot"`
	Mysqld  string             `json:"mysqld"`
	HostDir string             `json:"host_dir"`
	InDir   string             `json:"in_dir"`
	Servers []localServerState `json:"servers"`
}

type localServerState struct {
	Name     string `json:"name"`
	ServerID int    `json:"server_id"`
	Port     int    `json:"port"`
	Pid      int    `json:"pid"`
}

func (b *localBackend) state() backendState {
	st := &localState{Chroot: b.chroot, Mysqld: b.mysqld, HostDir: b.hostDir, InDir: b.inDir}
	for _, s := range b.servers {
		pid, _ := s.alive()
		st.Servers = append(st.Servers, localServerState{Name: s.name, ServerID: s.serverID, Port: s.port, Pid: pid})
	}
	return backendState{Local: st}
}

// StateVersion is the version of the State layout written by this code.
// Version 1 counted epochs from 0; ParseState reads it as version 2 (epochs
// from FirstEpoch: one more).
const StateVersion = 2

// State is what another process needs to find a running topology again
// (the CLI's state file): its nodes and roles, its epoch, and what the
// backend needs to reach its processes or containers.
type State struct {
	// Version is StateVersion when written.
	Version int `json:"version"`
	// Backend is the backend the topology runs on.
	Backend Backend `json:"backend"`
	// Engine is the database engine ("" is MySQL).
	Engine Engine `json:"engine,omitempty"`
	// Nodes are every node with its current role.
	Nodes []Node `json:"nodes"`
	// Epoch is the topology epoch.
	Epoch uint64 `json:"epoch"`
	// Stats are the fallback counts so far.
	Stats Stats `json:"stats"`
	// PendingRepoint maps replicas a failover could not repoint (paused,
	// down, unreachable) to why; Resume, Restart or Heal repoints them.
	PendingRepoint map[string]string `json:"pending_repoint,omitempty"`
	// Image and RootFS are what the servers run from.
	Image  string `json:"image,omitempty"`
	RootFS string `json:"rootfs,omitempty"`
	// Internal is backend-specific.
	Internal backendState `json:"internal"`
}

// State returns the topology's state for Attach.
func (t *Topology) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	var pending map[string]string
	if len(t.pending) > 0 {
		pending = make(map[string]string, len(t.pending))
		for k, v := range t.pending {
			pending[k] = v
		}
	}
	eng := t.eng.kind()
	if eng == EngineMySQL {
		eng = ""
	}
	return State{Version: StateVersion, Backend: t.cfg.Backend, Engine: eng, Nodes: append([]Node(nil), t.nodes...),
		Epoch: t.epoch, Stats: t.stats, PendingRepoint: pending, Image: t.cfg.Image, RootFS: t.cfg.RootFS, Internal: t.be.state()}
}

// Attach finds a topology again from its State (written by another
// process). Faults and Down work as on the Topology Start returned; local
// servers restarted from here are detached from this process.
func Attach(ctx context.Context, st State, logger *slog.Logger) (*Topology, error) {
	if st.Version != StateVersion {
		return nil, fmt.Errorf("compose: state version %d, this causallab reads %d", st.Version, StateVersion)
	}
	if len(st.Nodes) == 0 {
		return nil, errors.New("compose: state has no nodes")
	}
	cfg := Config{Backend: st.Backend, Engine: st.Engine, Image: st.Image, RootFS: st.RootFS, Detach: true, Logger: logger,
		User: st.Nodes[0].User, Password: st.Nodes[0].Password}
	if st.Backend == BackendExternal {
		cfg.External.PrimaryDSN = st.Nodes[0].DSN() // validated only; nodes come from st
		cfg.Replicas = 0
	} else {
		cfg.PrimaryOnly = len(st.Nodes) == 1
		cfg.Replicas = len(st.Nodes) - 1
	}
	cfg.User, cfg.Password = "", ""
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.User, cfg.Password = st.Nodes[0].User, st.Nodes[0].Password
	var be backend
	switch st.Backend {
	case BackendLocal:
		ls := st.Internal.Local
		if ls == nil {
			return nil, errors.New("compose: local state lacks its process table")
		}
		lb := newLocalBackend(&cfg)
		lb.chroot, lb.mysqld, lb.hostDir, lb.inDir = ls.Chroot, ls.Mysqld, ls.HostDir, ls.InDir
		if lb.spec.user != "" && lb.chroot != "" {
			uid, gid, err := lookupUser(filepath.Join(lb.chroot, "etc/passwd"), lb.spec.user)
			if err != nil {
				return nil, fmt.Errorf("compose: %w", err)
			}
			lb.uid, lb.gid = uid, gid
		}
		for _, s := range ls.Servers {
			srv := &localServer{name: s.Name, serverID: s.ServerID, port: s.Port, pid: s.Pid,
				hostDir: filepath.Join(ls.HostDir, s.Name), inDir: ls.InDir + "/" + s.Name, group: lb.spec.group}
			if lb.spec != mysqlSpec {
				srv.marker = lb.spec.marker(srv.inDir)
			}
			lb.servers = append(lb.servers, srv)
		}
		be = lb
	case BackendDocker:
		ds := st.Internal.Docker
		if ds == nil {
			return nil, errors.New("compose: docker state lacks its containers")
		}
		db := newDockerBackend(&cfg)
		db.networkID, db.network = ds.NetworkID, ds.Network
		for _, s := range ds.Servers {
			db.servers = append(db.servers, &dockerServer{name: s.Name, serverID: s.ServerID, hostPort: s.HostPort, id: s.ID})
		}
		if _, err := db.client(ctx); err != nil {
			return nil, err
		}
		be = db
	case BackendExternal:
		be = newExternalBackend(&cfg)
	}
	pending := map[string]string{}
	for k, v := range st.PendingRepoint {
		pending[k] = v
	}
	eng, err := engineFor(cfg.Engine)
	if err != nil {
		return nil, err
	}
	return &Topology{cfg: cfg, be: be, eng: eng, log: cfg.Logger, dbs: map[string]*sql.DB{},
		nodes: append([]Node(nil), st.Nodes...), epoch: st.Epoch, stats: st.Stats, pending: pending}, nil
}

// WriteStateFile writes st to path atomically.
func WriteStateFile(path string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadStateFile reads a state file. A missing file gives an error for
// which errors.Is(err, fs.ErrNotExist) holds.
func ReadStateFile(path string) (State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return State{}, err
	}
	return ParseState(b)
}

// ParseState decodes a state file's contents, rejecting unknown fields,
// other versions and inconsistent node tables.
func ParseState(b []byte) (State, error) {
	var st State
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return State{}, fmt.Errorf("compose: bad state file: %w", err)
	}
	if st.Version == 1 { // written before epochs began at FirstEpoch
		st.Version, st.Epoch = StateVersion, st.Epoch+FirstEpoch
	}
	if st.Version != StateVersion {
		return State{}, fmt.Errorf("compose: bad state file: version %d, want %d", st.Version, StateVersion)
	}
	if st.Epoch < FirstEpoch {
		return State{}, fmt.Errorf("compose: bad state file: epoch %d (epochs begin at %d)", st.Epoch, FirstEpoch)
	}
	switch st.Backend {
	case BackendLocal, BackendDocker, BackendExternal:
	default:
		return State{}, fmt.Errorf("compose: bad state file: backend %q", st.Backend)
	}
	if _, err := engineFor(st.Engine); err != nil {
		return State{}, fmt.Errorf("compose: bad state file: %w", err)
	}
	if len(st.Nodes) == 0 || len(st.Nodes) > MaxReplicas+1 {
		return State{}, fmt.Errorf("compose: bad state file: %d nodes", len(st.Nodes))
	}
	names := map[string]bool{}
	primaries := 0
	for _, n := range st.Nodes {
		if names[n.Name] || n.Name == "" {
			return State{}, fmt.Errorf("compose: bad state file: node name %q empty or repeated", n.Name)
		}
		names[n.Name] = true
		if n.Port < 1 || n.Port > 65535 {
			return State{}, fmt.Errorf("compose: bad state file: %s port %d", n.Name, n.Port)
		}
		switch n.Role {
		case RolePrimary:
			primaries++
		case RoleReplica, RoleRetired:
		default:
			return State{}, fmt.Errorf("compose: bad state file: %s role %q", n.Name, n.Role)
		}
	}
	if primaries != 1 {
		return State{}, fmt.Errorf("compose: bad state file: %d primaries", primaries)
	}
	for name := range st.PendingRepoint {
		ok := false
		for _, n := range st.Nodes {
			ok = ok || (n.Name == name && n.Role == RoleReplica)
		}
		if !ok {
			return State{}, fmt.Errorf("compose: bad state file: pending repoint of %q, which is not a replica", name)
		}
	}
	if st.Backend == BackendLocal && (st.Internal.Local == nil || len(st.Internal.Local.Servers) != len(st.Nodes)) {
		return State{}, errors.New("compose: bad state file: local process table does not match the nodes")
	}
	if st.Backend == BackendDocker && (st.Internal.Docker == nil || len(st.Internal.Docker.Servers) != len(st.Nodes)) {
		return State{}, errors.New("compose: bad state file: docker container table does not match the nodes")
	}
	return st, nil
}

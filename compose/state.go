package compose

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

package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Worker peers (Config.WorkerDir): under `causallab proxy --workers N`
// each worker process answers for its own sessions, so a KILL of a
// session another worker holds, and the sessions SHOW PROCESSLIST lists
// beyond the worker's own, go to that worker. Each worker listens on
// <WorkerDir>/worker-<index>.sock; a request is one JSON object on its
// own connection, the answer one JSON object back. The owner decides as
// for its own clients: the asking account's name and whether its server
// granted it CONNECTION_ADMIN (KILL) or PROCESS (the list) travel with
// the request, asked on the asking session's own connection as always.
// The directory is the supervisor's, mode 0700, and a peer whose process
// runs as another user is refused (SO_PEERCRED).

// peerOp is what a request asks.
type peerOp string

const (
	peerKill peerOp = "kill"
	peerList peerOp = "list"
)

// peerRequest is one worker's request to another.
type peerRequest struct {
	Op peerOp `json:"op"`
	// ID and Query: KILL [QUERY] ID.
	ID    uint32 `json:"id,omitempty"`
	Query bool   `json:"query,omitempty"`
	// User is the asking session's account; Admin: its server granted it
	// CONNECTION_ADMIN (kill) or PROCESS (list), or SUPER.
	User  string `json:"user"`
	Admin bool   `json:"admin,omitempty"`
	// Full: SHOW FULL PROCESSLIST (Info not cut to 100 characters).
	Full bool `json:"full,omitempty"`
}

// peerReply is the owner's answer: a kill's outcome (killDone, killIdle,
// killUnknown, killDenied), or the list's rows.
type peerReply struct {
	Outcome string    `json:"outcome,omitempty"`
	Rows    []peerRow `json:"rows,omitempty"`
}

// peerRow is one processlist row (peer.row's) with its session's id.
type peerRow struct {
	ID  uint32 `json:"id"`
	Row []byte `json:"row"`
}

// maxPeerRequest bounds a request's bytes (a request is a few dozen).
const maxPeerRequest = 4096

// peerSocket is worker i's socket in dir.
func peerSocket(dir string, i int) string {
	return filepath.Join(dir, "worker-"+strconv.Itoa(i)+".sock")
}

// peerExchange bounds one request and its answer: a kill waits for the
// KILL QUERY it sends (connect_timeout) and may re-send it for
// killResendTotal.
func (s *Server) peerExchange() time.Duration {
	return killResendTotal + 2*s.cfg.ConnectTimeout + time.Second
}

// listenPeers opens this worker's peer socket (Listen), when it has
// peers.
func (s *Server) listenPeers(ctx context.Context) error {
	if s.cfg.WorkerDir == "" || s.cfg.Workers < 2 {
		return nil
	}
	path := peerSocket(s.cfg.WorkerDir, s.cfg.WorkerIndex)
	_ = os.Remove(path) // a previous run's, left by a crash
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("proxy: worker peer socket: %w", err)
	}
	s.peerLn = ln
	return nil
}

// servePeers answers the other workers until the listener closes.
func (s *Server) servePeers() {
	for {
		c, err := s.peerLn.Accept()
		if err != nil {
			return // closed at shutdown
		}
		go s.servePeer(c)
	}
}

// servePeer answers one request on c.
func (s *Server) servePeer(c net.Conn) {
	defer c.Close()
	if err := samePeerUser(c); err != nil {
		s.log.Warn("worker peer refused", "err", err.Error())
		return
	}
	_ = c.SetDeadline(time.Now().Add(s.peerExchange()))
	var req peerRequest
	if err := json.NewDecoder(io.LimitReader(c, maxPeerRequest)).Decode(&req); err != nil {
		s.log.Warn("unreadable worker peer request", "err", err.Error())
		return
	}
	rep, err := s.answerPeer(req)
	if err != nil {
		s.log.Warn("worker peer request refused", "op", req.Op, "err", err.Error())
		return
	}
	_ = json.NewEncoder(c).Encode(rep) // the asker counts a lost answer
}

// samePeerUser checks that c's other end runs as this process's user.
func samePeerUser(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer process %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// answerPeer carries out req on this worker's sessions.
func (s *Server) answerPeer(req peerRequest) (peerReply, error) {
	switch req.Op {
	case peerKill:
		return peerReply{Outcome: s.killForPeer(req)}, nil
	case peerList:
		now := time.Now()
		var rows []peerRow
		for _, p := range s.peers(0) {
			if req.Admin || p.user == req.User {
				rows = append(rows, peerRow{ID: p.id, Row: p.row(now, req.Full, false)})
			}
		}
		return peerReply{Rows: rows}, nil
	}
	return peerReply{}, fmt.Errorf("unknown op %q", req.Op)
}

// killForPeer kills as session.kill does, for another worker's client:
// the session of req.ID, if this worker holds it, when its account is
// the asker's or the asker is an admin.
func (s *Server) killForPeer(req peerRequest) string {
	ps := s.peers(req.ID)
	if req.ID == 0 || len(ps) == 0 {
		return killUnknown
	}
	t := ps[0]
	if t.user != req.User && !req.Admin {
		return killDenied
	}
	// The target session sends the kill (its own context bounds the
	// re-sends; a KILL CONNECTION ends it).
	if t.sess.killRunning(t.sess.run, !req.Query) || !req.Query {
		return killDone
	}
	return killIdle
}

// peerOwner is the worker that gives session id (allocID), when that is
// another worker this one can ask: -1 when none.
func (s *Server) peerOwner(id uint64) int {
	n := s.cfg.Workers
	if s.peerLn == nil || id == 0 || id > 1<<32-1 {
		return -1
	}
	if w := int((id - 1) % uint64(n)); w != s.cfg.WorkerIndex {
		return w
	}
	return -1
}

// askPeer sends req to worker w and reads its answer.
func (s *Server) askPeer(ctx context.Context, w int, req peerRequest) (peerReply, error) {
	ctx, cancel := context.WithTimeout(ctx, s.peerExchange())
	defer cancel()
	d := net.Dialer{Timeout: s.cfg.ConnectTimeout}
	c, err := d.DialContext(ctx, "unix", peerSocket(s.cfg.WorkerDir, w))
	if err != nil {
		return peerReply{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return peerReply{}, err
	}
	var rep peerReply
	if err := json.NewDecoder(io.LimitReader(c, int64(s.cfg.MaxAllowedPacket))).Decode(&rep); err != nil {
		return peerReply{}, fmt.Errorf("worker %d's answer: %w", w, err)
	}
	return rep, nil
}

// killOnPeer is session.kill for a session worker w holds: the asking
// account's CONNECTION_ADMIN asked of its server first (the owner knows
// the target's account, not the asker's grants).
func (s *session) killOnPeer(st Stmt, w int, count func(string)) (*mysql.Result, error) {
	admin, err := s.hasPrivilege(privKill)
	if err != nil {
		return nil, err
	}
	rep, err := s.srv.askPeer(s.ctx, w, peerRequest{Op: peerKill, ID: uint32(st.KillID), Query: st.KillQuery, User: s.account(), Admin: admin})
	if err != nil {
		return nil, s.proxyErr("worker-peer-failed", mysql.ER_UNKNOWN_ERROR,
			"KILL %d: the session is worker %d's, which did not answer: %v", st.KillID, w, err)
	}
	count(rep.Outcome)
	switch rep.Outcome {
	case killUnknown:
		return nil, mysql.NewDefaultError(mysql.ER_NO_SUCH_THREAD, st.KillID)
	case killDenied:
		return nil, mysql.NewDefaultError(mysql.ER_KILL_DENIED_ERROR, st.KillID)
	}
	return nil, nil
}

// peerRows are the processlist rows of every other worker's sessions the
// asking account may see (all with PROCESS), with this worker's own
// (mine): in id order.
func (s *session) peerRows(mine []peerRow, all, full bool) ([]peerRow, error) {
	if s.srv.peerLn == nil {
		return mine, nil
	}
	rows := mine
	for w := range s.srv.cfg.Workers {
		if w == s.srv.cfg.WorkerIndex {
			continue
		}
		rep, err := s.srv.askPeer(s.ctx, w, peerRequest{Op: peerList, User: s.account(), Admin: all, Full: full})
		if err != nil {
			return nil, s.proxyErr("worker-peer-failed", mysql.ER_UNKNOWN_ERROR,
				"SHOW PROCESSLIST: worker %d did not answer: %v", w, err)
		}
		rows = append(rows, rep.Rows...)
	}
	slices.SortFunc(rows, func(a, b peerRow) int { return cmp.Compare(a.ID, b.ID) })
	return rows, nil
}

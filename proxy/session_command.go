package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The session's command loop, in the manner of Vitess's
// Conn.handleNextCommand: one function reads the client's next command
// (clientConn.readCommand) and one switch dispatches it on its first
// byte to the handler of that command; each handler returns a result or
// an error, and writeResult writes it (a handler that relayed a backend's
// response itself returns done()).

// errQuit ends a session whose client sent COM_QUIT.
var errQuit = errors.New("proxy: the client quit")

// handleNextCommand reads the client's next command and answers it. An
// error ends the session (io.EOF or errQuit: the client went).
func (s *session) handleNextCommand() error {
	s.cc.inTx = s.state.inTx() // idle_in_transaction_timeout
	payload, err := s.cc.readCommand()
	if err != nil {
		return err
	}
	if payload[0] == mysql.COM_QUIT {
		return errQuit
	}
	s.run.begin(payload[0], s.commandText(payload), s.state.db)
	res, err := s.dispatch(payload)
	if s.run.finish(s.state.db) && err != nil {
		// A KILL QUERY from another session reached the statement: the
		// client gets MySQL's answer, whatever the proxy met.
		err = mysql.NewDefaultError(mysql.ER_QUERY_INTERRUPTED)
	}
	if werr := s.writeResult(payload[0], res, err); werr != nil {
		return werr
	}
	if s.cc.closed {
		return io.EOF
	}
	return nil
}

// dispatch runs the handler of the command in payload (command byte
// onward, valid during the command). COM_STMT_SEND_LONG_DATA never
// arrives here: it has no response, and clientConn streams its data into
// the statement memory as it arrives (stmtMemory.readLongData).
func (s *session) dispatch(payload []byte) (*mysql.Result, error) {
	data := payload[1:]
	if payload[0] != mysql.COM_STMT_CLOSE {
		if err := s.rebase(); err != nil {
			return nil, err
		}
	}
	switch payload[0] {
	case mysql.COM_QUERY, mysql.COM_PING, mysql.COM_STMT_CLOSE:
		// COM_QUERY settles GET DIAGNOSTICS's variables itself.
	case mysql.COM_RESET_CONNECTION, mysql.COM_CHANGE_USER:
		s.diag = diagCopy{} // the variables are reset
	default:
		if err := s.settleDiag(); err != nil {
			return nil, err
		}
	}
	switch payload[0] {
	case mysql.COM_QUERY:
		return s.handleQuery(payloadText(payload))
	case mysql.COM_STMT_PREPARE:
		return s.handleStmtPrepare(payloadText(payload))
	case mysql.COM_STMT_EXECUTE:
		return s.handleStmtExecute(payload)
	case mysql.COM_STMT_CLOSE:
		s.handleStmtClose(data)
		return done(), nil // no response, in MySQL too
	case mysql.COM_STMT_RESET:
		return nil, s.handleStmtReset(data)
	case mysql.COM_PING:
		return nil, nil
	case mysql.COM_INIT_DB:
		return nil, s.useDB(string(data))
	case mysql.COM_FIELD_LIST:
		return s.handleFieldList(data)
	case mysql.COM_RESET_CONNECTION:
		return nil, s.resetSession()
	case mysql.COM_CHANGE_USER:
		return nil, s.changeUser(data)
	case mysql.COM_SET_OPTION:
		return nil, s.setOption(data)
	}
	return nil, s.proxyErr("unsupported", mysql.ER_UNKNOWN_COM_ERROR, "command 0x%02x is not supported by the proxy", payload[0])
}

// writeResult writes a handler's answer to command cmd: the error, the
// result set or field list it built, EOF for COM_SET_OPTION, or an OK
// packet; nothing when the response was relayed already (done()).
func (s *session) writeResult(cmd byte, res *mysql.Result, err error) error {
	switch {
	case err != nil:
		return s.cc.writeErr(err)
	case res == relayed:
		return nil
	case cmd == mysql.COM_SET_OPTION:
		return s.cc.writeEOF()
	case cmd == mysql.COM_FIELD_LIST && res != nil && res.Resultset != nil:
		return s.cc.writeFields(res.Fields)
	case res.HasResultset():
		return s.cc.writeResultset(res.Resultset)
	}
	return s.cc.writeOK(s.withTrackedToken(res))
}

// handleFieldList answers COM_FIELD_LIST (a table name, NUL, a wildcard)
// with the primary's column definitions.
func (s *session) handleFieldList(data []byte) (*mysql.Result, error) {
	table, wildcard := string(data), ""
	for i, b := range data {
		if b == 0 {
			table, wildcard = string(data[:i]), string(data[i+1:])
			break
		}
	}
	fs, err := s.fieldList(table, wildcard)
	if err != nil {
		return nil, err
	}
	return &mysql.Result{Resultset: &mysql.Resultset{Fields: fs}}, nil
}

// stmtID reads the statement id that starts data (COM_STMT_EXECUTE,
// COM_STMT_CLOSE, COM_STMT_RESET after the command byte).
func stmtID(data []byte) (uint32, bool) {
	if len(data) < 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(data), true
}

// unknownStmt is MySQL's error for a statement id the session never
// prepared (or closed), naming the command as MySQL does.
func unknownStmt(id uint32, command string) error {
	return mysql.NewError(mysql.ER_UNKNOWN_STMT_HANDLER, fmt.Sprintf("Unknown prepared statement handler (%d) given to %s", id, command))
}

// commandText is a command's statement text for the processlist: a
// query's or a prepare's, the prepared statement's for an execution.
func (s *session) commandText(payload []byte) string {
	switch payload[0] {
	case mysql.COM_QUERY, mysql.COM_STMT_PREPARE:
		return payloadText(payload)
	case mysql.COM_STMT_EXECUTE:
		if id, ok := stmtID(payload[1:]); ok {
			if p := s.state.stmts[id]; p != nil {
				return p.query
			}
		}
	}
	return ""
}

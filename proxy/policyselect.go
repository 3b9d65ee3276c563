package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/sqllex"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// Choosing the routing policy per session or per statement.
//
//	SET @causal_policy = 'global(200ms)+defer'   the session's policy from now on
//	SET @causal_policy = ''                      back to the proxy's configured policy
//	SELECT @causal_policy                        the session's policy, in router.ParsePolicy's syntax
//	/* causal_policy=global */ SELECT ...        this statement only (COM_QUERY)
//
// The value is router.ParsePolicy's text (any, affinity(MODE), window(DUR),
// token-ryw, token-ryw-mr, token-wait(DUR), global(DUR), with +defer and
// +epoch). The proxy's epoch check stays on whatever the client chooses:
// it is what keeps a token from a lost timeline from being served. The
// statements are answered by the proxy and never reach a backend; any other
// statement naming @causal_policy is refused (the proxy does not evaluate
// expressions, and the server's own variable would silently do nothing).
// A comment's policy applies to the one statement it is in; in a prepared
// statement's text it is refused (a statement's policy would have to
// follow it to every execution).

// policyKey is the annotation and variable name.
const policyKey = "causal_policy"

// maxPolicyText bounds a policy text a client sends.
const maxPolicyText = 128

var (
	// errPolicyNotLiteral: @causal_policy used other than in the two
	// statements the proxy answers.
	errPolicyNotLiteral = errors.New("@causal_policy can only be set with SET @causal_policy = '<policy>' alone, or read with SELECT @causal_policy alone")
	// errConflictingPolicies: two different causal_policy annotations.
	errConflictingPolicies = errors.New("two different causal_policy annotations in one statement")
	// errPolicyInPrepare: a causal_policy annotation in a prepared
	// statement's text.
	errPolicyInPrepare = errors.New("a causal_policy annotation is not supported in a prepared statement (use SET @causal_policy for the session)")
)

// policyStmtKind is what a statement does with @causal_policy.
type policyStmtKind uint8

const (
	policyNone    policyStmtKind = iota // the statement does not name it
	policySet                           // SET @causal_policy = '<text>'
	policyGet                           // SELECT @causal_policy
	policyComment                       // a /* causal_policy=<text> */ annotation on another statement
)

// policyStmt is the parsed use of @causal_policy in one statement.
type policyStmt struct {
	kind policyStmtKind
	text string // the policy text (policySet, policyComment)
}

// mentionsPolicy reports whether s contains causal_policy in any case (the
// fast path: most statements do not, and are not lexed again).
func mentionsPolicy(s string) bool {
	for i := 0; i+len(policyKey) <= len(s); i++ {
		if c := s[i]; (c == 'c' || c == 'C') && strings.EqualFold(s[i:i+len(policyKey)], policyKey) {
			return true
		}
	}
	return false
}

// parsePolicyStmt finds a statement's use of @causal_policy: the two
// statements the proxy answers, an annotation in a comment, or nothing.
// Another use of the variable, two different annotations or an empty one
// are errors.
func parsePolicyStmt(query string) (policyStmt, error) {
	if !mentionsPolicy(query) {
		return policyStmt{}, nil
	}
	var notes policyNotes
	l := sqllex.Lexer{S: query, Comment: notes.comment}
	var toks [6]sqllex.Token
	n, usesVar := 0, false
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		if n < len(toks) {
			toks[n] = t
		}
		n++
		if t.Kind == sqllex.Var && isPolicyVar(t.Text) {
			usesVar = true
		}
	}
	if notes.err != nil {
		return policyStmt{}, notes.err
	}
	if usesVar {
		if l.Unterminated {
			return policyStmt{}, errPolicyNotLiteral
		}
		return policyVarStmt(toks[:min(n, len(toks))], n > len(toks))
	}
	if notes.noted {
		return policyStmt{kind: policyComment, text: notes.note}, nil
	}
	return policyStmt{}, nil
}

// policyNotes collects the causal_policy annotations of a statement's
// comments.
type policyNotes struct {
	note  string
	noted bool
	err   error // the first empty or conflicting annotation
}

// comment reads one comment's fields (separated by whitespace, ',' or
// ';'), causal_policy=<text> or causal_policy:<text> among them; an
// optimizer hint has none.
func (a *policyNotes) comment(c sqllex.Comment) {
	if c.Kind == sqllex.Hint {
		return
	}
	for _, f := range strings.FieldsFunc(c.Body, isPolicyFieldSep) {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			key, val, ok = strings.Cut(f, ":")
		}
		if !ok || !strings.EqualFold(key, policyKey) {
			continue
		}
		switch {
		case val == "":
			a.err = firstErr(a.err, fmt.Errorf("%w: %s", ErrEmptyAnnotation, policyKey))
		case a.noted && val != a.note:
			a.err = firstErr(a.err, errConflictingPolicies)
		}
		a.note, a.noted = val, true
	}
}

// isPolicyFieldSep separates the fields of a comment.
func isPolicyFieldSep(r rune) bool {
	return r == ',' || r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
}

// policyVarStmt is the use of @causal_policy by a statement (lexically
// whole) whose first tokens are t, all of them unless more: SET
// @causal_policy = '<text>' or SELECT @causal_policy alone (a semicolon
// may end either); anything else is errPolicyNotLiteral.
func policyVarStmt(t []sqllex.Token, more bool) (policyStmt, error) {
	if len(t) > 0 && t[len(t)-1].Punct(';') {
		t = t[:len(t)-1]
	}
	switch {
	case !more && len(t) == 4 && t[0].Is("SET") && (t[2].Punct('=') || t[2].Kind == sqllex.Assign) && t[3].Kind == sqllex.String:
		return policyStmt{kind: policySet, text: unquote(t[3].Text)}, nil
	case !more && len(t) == 2 && t[0].Is("SELECT"):
		return policyStmt{kind: policyGet}, nil
	}
	return policyStmt{}, errPolicyNotLiteral
}

// firstErr keeps the first error.
func firstErr(have, next error) error {
	if have != nil {
		return have
	}
	return next
}

func isPolicyVar(v string) bool {
	name := v[1:]
	if len(name) >= 2 && (name[0] == '`' || name[0] == '\'' || name[0] == '"') && name[len(name)-1] == name[0] {
		name = name[1 : len(name)-1]
	}
	return strings.EqualFold(name, policyKey)
}

// clientPolicy parses a policy a client chose; the proxy's epoch check is
// kept on.
func (s *session) clientPolicy(text string) (router.Policy, error) {
	if len(text) > maxPolicyText {
		return router.Policy{}, s.proxyErr("bad-policy", codeProxy, "@causal_policy of %d bytes exceeds %d", len(text), maxPolicyText)
	}
	p, err := router.ParsePolicy(text)
	if err != nil {
		return router.Policy{}, s.proxyErr("bad-policy", codeProxy, "@causal_policy: %s", strings.TrimPrefix(err.Error(), "router: "))
	}
	p.CheckEpoch = p.CheckEpoch || s.srv.policy.CheckEpoch
	return p, nil
}

// selectPolicy handles a COM_QUERY's use of @causal_policy. handled: the
// statement was SET or SELECT @causal_policy and res is its answer (nil res:
// OK). Otherwise restore, when not nil, puts back the session's policy after
// the statement, which runs under the annotation's policy.
func (s *session) selectPolicy(query string) (handled bool, res *mysql.Result, restore func(), err error) {
	ps, err := parsePolicyStmt(query)
	if err != nil {
		return true, nil, nil, s.proxyErr("bad-annotation", codeProxy, "%v", err)
	}
	switch ps.kind {
	case policySet:
		s.srv.m.statements.WithLabelValues("set-policy", "proxy").Inc()
		p := s.srv.policy
		if t := strings.TrimSpace(ps.text); t != "" && !strings.EqualFold(t, "default") {
			if p, err = s.clientPolicy(t); err != nil {
				return true, nil, nil, err
			}
		}
		if err := s.ls.SetPolicy(p); err != nil {
			return true, nil, nil, s.proxyErr("bad-policy", codeProxy, "@causal_policy: %v", err)
		}
		return true, nil, nil, nil
	case policyGet:
		s.srv.m.statements.WithLabelValues("get-policy", "proxy").Inc()
		v := s.ls.Policy().String()
		return true, mysql.NewResult(oneValueResultset("@causal_policy", &v)), nil, nil
	case policyComment:
		p, err := s.clientPolicy(ps.text)
		if err != nil {
			return true, nil, nil, err
		}
		prev := s.ls.Policy()
		if err := s.ls.SetPolicy(p); err != nil {
			return true, nil, nil, s.proxyErr("bad-policy", codeProxy, "causal_policy: %v", err)
		}
		return false, nil, func() { _ = s.ls.SetPolicy(prev) }, nil
	}
	return false, nil, nil, nil
}

// checkPreparePolicy refuses a causal_policy annotation in a prepared
// statement's text.
func (s *session) checkPreparePolicy(query string) error {
	ps, err := parsePolicyStmt(query)
	switch {
	case err != nil:
		return s.proxyErr("bad-annotation", codeProxy, "%v", err)
	case ps.kind != policyNone:
		return s.proxyErr("bad-annotation", codeProxy, "%v", errPolicyInPrepare)
	}
	return nil
}

// deferredErr is the client's error for a deferred read: the configured
// code (Config.DeferErrorCode), the reason, and when to retry (whole
// milliseconds, rounded up).
func (s *session) deferredErr(e *live.ReadError) error {
	ms := (e.RetryAfter + time.Millisecond - 1) / time.Millisecond
	return s.proxyErr("deferred", s.srv.cfg.DeferErrorCode,
		"read deferred: %s; retry after %d ms (no replica holds what the read needs; the primary was not used)", e.Reason, ms)
}

// validatePolicySelect fills and checks the config fields of this file's
// features (DeferErrorCode, GlobalSource).
func (c *Config) validatePolicySelect() error {
	if c.DeferErrorCode == 0 {
		c.DeferErrorCode = codeProxy
	}
	if c.DeferErrorCode < 1000 {
		return fmt.Errorf("proxy: defer_error_code %d out of range (a MySQL error code, 1000..65535)", c.DeferErrorCode)
	}
	return oneOf("global_source", &c.GlobalSource, live.GlobalPrimaryQuery.String(), live.GlobalView.String())
}

// globalSource is the live router's GlobalSource for the config's name.
func (c *Config) globalSource() live.GlobalSource {
	if c.GlobalSource == live.GlobalView.String() {
		return live.GlobalView
	}
	return live.GlobalPrimaryQuery
}

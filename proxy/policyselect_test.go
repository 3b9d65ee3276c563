package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/causallab/causallab/router"
)

func TestParsePolicyStmt(t *testing.T) {
	for _, c := range []struct {
		q    string
		kind policyStmtKind
		text string
		err  error
	}{
		{q: "SELECT 1"},
		{q: "SELECT 'causal_policy' FROM t"}, // a string, not the variable
		{q: "SET @causal_policy = 'global(200ms)+defer'", kind: policySet, text: "global(200ms)+defer"},
		{q: "set @CAUSAL_POLICY:='any';", kind: policySet, text: "any"},
		{q: "SET @`causal_policy` = \"token-ryw\"", kind: policySet, text: "token-ryw"},
		{q: "SET @causal_policy = ''", kind: policySet, text: ""},
		{q: "SELECT @causal_policy", kind: policyGet},
		{q: "select @causal_policy ;", kind: policyGet},
		{q: "/* causal_policy=global */ SELECT * FROM t", kind: policyComment, text: "global"},
		{q: "SELECT /* consistent_read_id:u1, causal_policy:token-wait(50ms)+defer */ 1", kind: policyComment, text: "token-wait(50ms)+defer"},
		{q: "SELECT 1 -- causal_policy=any\n", kind: policyComment, text: "any"},
		{q: "/* causal_policy=any */ SELECT /* causal_policy=any */ 1", kind: policyComment, text: "any"},
		{q: "/*+ causal_policy=any */ SELECT 1"}, // an optimizer hint is the server's
		{q: "/* causal_policy=any */ /* causal_policy=global */ SELECT 1", err: errConflictingPolicies},
		{q: "/* causal_policy= */ SELECT 1", err: ErrEmptyAnnotation},
		{q: "SET @causal_policy = CONCAT('glo', 'bal')", err: errPolicyNotLiteral},
		{q: "SET @a = 1, @causal_policy = 'any'", err: errPolicyNotLiteral},
		{q: "SELECT @causal_policy, 1", err: errPolicyNotLiteral},
		{q: "SELECT 1 INTO @causal_policy", err: errPolicyNotLiteral},
		{q: "SET @causal_policy = 'any'; DROP TABLE t", err: errPolicyNotLiteral},
		{q: "SET @causal_policy = 'any", err: errPolicyNotLiteral}, // unterminated
	} {
		ps, err := parsePolicyStmt(c.q)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%q: err %v, want %v", c.q, err, c.err)
			}
			continue
		}
		if err != nil || ps.kind != c.kind || ps.text != c.text {
			t.Errorf("%q: %+v %v, want kind %d text %q", c.q, ps, err, c.kind, c.text)
		}
	}
}

func TestPolicySelectConfig(t *testing.T) {
	c := validConfig()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.DeferErrorCode != codeProxy || c.GlobalSource != "primary-query" {
		t.Errorf("defaults: defer_error_code %d, global_source %q", c.DeferErrorCode, c.GlobalSource)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.DeferErrorCode = 999 },
		func(c *Config) { c.GlobalSource = "primary" },
		func(c *Config) { c.Policy = "global(200ms)" }, // a config names a kind; the budget is wait_budget
	} {
		c := validConfig()
		bad(&c)
		if err := c.validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	c = validConfig()
	c.Policy, c.GlobalSource, c.DeferErrorCode = "global", "view", 1205
	if err := c.validate(); err != nil || c.globalSource().String() != "view" {
		t.Errorf("global with the view source: %v", err)
	}
	if k, err := policyKind("global"); err != nil || k != router.PolicyGlobal {
		t.Errorf("policy global: %v %v", k, err)
	}
}

func FuzzParsePolicyStmt(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "SET @causal_policy = 'global'", "SELECT @causal_policy", "/* causal_policy=any */ SELECT 1",
		"/* causal_policy= */ SELECT 1", "SET @causal_policy = CONCAT('a')", "SET @causal_policy = 'x", "/* causal_policy",
		"-- causal_policy:any", "SELECT @`causal_policy`", "SET @'causal_policy' := 'token-ryw+defer';",
		"/* causal_policy=a */ /* CAUSAL_POLICY=b */", "causal_policy", "@causal_policy",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		ps, err := parsePolicyStmt(q)
		if err != nil {
			if !errors.Is(err, errPolicyNotLiteral) && !errors.Is(err, errConflictingPolicies) && !errors.Is(err, ErrEmptyAnnotation) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if ps.kind > policyComment {
			t.Fatalf("unknown kind %d", ps.kind)
		}
		if ps.kind != policyNone && !mentionsPolicy(q) {
			t.Fatalf("%q: kind %d without the name", q, ps.kind)
		}
		if ps.kind == policyComment && (ps.text == "" || !strings.Contains(q, ps.text)) {
			t.Fatalf("%q: comment policy %q not in the input", q, ps.text)
		}
		// Whatever the text, parsing it as a policy fails cleanly or
		// gives a valid policy.
		if p, err := router.ParsePolicy(ps.text); err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("ParsePolicy(%q) gave an invalid policy: %v", ps.text, err)
			}
		}
	})
}

func validConfig() Config {
	return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
		Replicas: []Backend{{Addr: "127.0.0.1:3307"}}}
}

// TestPolicyAnnotationBesideOthers: causal_policy in one comment with a
// consistent_read_id and a causal_token (the lab's reads through the proxy
// carry all three) leaves the other two readable.
func TestPolicyAnnotationBesideOthers(t *testing.T) {
	q := "/* consistent_read_id:session-7, causal_token:g1.1.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5, causal_policy=token-wait(400ms)+epoch+defer */ SELECT 1"
	st, err := Classify(q)
	if err != nil || st.Kind != KindRead || st.ReadID != "session-7" || st.Token != "g1.1.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5" {
		t.Fatalf("Classify: %+v %v", st, err)
	}
	ps, err := parsePolicyStmt(q)
	if err != nil || ps.kind != policyComment || ps.text != "token-wait(400ms)+epoch+defer" {
		t.Fatalf("parsePolicyStmt: %+v %v", ps, err)
	}
	if p, err := router.ParsePolicy(ps.text); err != nil || !p.Defer || !p.CheckEpoch {
		t.Fatalf("ParsePolicy(%q): %+v %v", ps.text, p, err)
	}
}

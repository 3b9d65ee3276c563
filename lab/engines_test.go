package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

func TestEngineFailoverConfigValidate(t *testing.T) {
	ok := EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMariaDB}}
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if ok.Sessions != 24 || ok.FailoverAt != 6*time.Second || ok.ReadsPerWrite != 3 {
		t.Errorf("defaults not filled: %+v", ok)
	}
	for _, c := range []struct {
		cfg  EngineFailoverConfig
		want string
	}{
		{EngineFailoverConfig{}, "no engine"},
		{EngineFailoverConfig{Engines: []compose.Engine{"oracle"}}, `unknown engine "oracle"`},
		{EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL}, Sessions: -1}, "sessions"},
		{EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL}, Duration: 10 * time.Second, FailoverAt: 11 * time.Second}, "before the end"},
		{EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL}, HoldBack: 7 * time.Second}, "after the hold-back"},
		{EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL}, GapMin: time.Second, GapMax: time.Millisecond}, "gaps"},
		{EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL}, WaitBudget: 5 * time.Second}, "below the read timeout"},
	} {
		if err := c.cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

func TestEngineTokens(t *testing.T) {
	seen := map[EngineToken]bool{}
	for _, e := range compose.Engines() {
		toks := EngineTokens(e)
		if len(toks) < 2 {
			t.Errorf("%s: %v, want a token and its epoch form at least", e, toks)
		}
		for _, tok := range toks {
			if seen[tok] {
				t.Errorf("token %s on two engines", tok)
			}
			seen[tok] = true
			if tok.SimKind() == "" {
				t.Errorf("%s: no simulator model", tok)
			}
		}
	}
	if EngineTokens("oracle") != nil {
		t.Error("tokens for an unknown engine")
	}
}

func TestEngineFailoverTable(t *testing.T) {
	res := &EngineFailoverResult{Rows: []EngineTokenRow{{Engine: compose.EngineMariaDB, Token: TokMariaDBGTID, Reads: 10, Stale: 2, SimKind: TokMariaDBGTID.SimKind()}},
		Failovers: []EngineFailover{{Engine: compose.EngineMariaDB, Result: compose.FailoverResult{NewPrimary: "replica1", Epoch: 2, LostGTIDs: "0-1-5..7"}}}}
	var b strings.Builder
	if err := EngineFailoverTable(res).Write(&b, "md"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| mariadb | gtid-position | 10 | 2 |", "lost 0-1-5..7", "scalar position (LSN-like)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestReadServerErrorsCountOnlyRefusals: causallab_proxy_read_server_errors_total
// counts a routed read only when the server refused it. A session that
// runs SELECT 1 adds nothing; the mysql 9.x client's connect-time probe
// `select $$` (does the server take dollar-quoted strings?) is refused by
// MySQL with 1064 and counts once: the count a newcomer sees per mysql
// client session (issue 43, item 7) is that probe, not a phantom.
func TestReadServerErrorsCountOnlyRefusals(t *testing.T) {
	s := startProxy(t, nil)
	count := func() string {
		for _, l := range strings.Split(metricText(t, s), "\n") {
			if strings.HasPrefix(l, "causallab_proxy_read_server_errors_total{") {
				return l
			}
		}
		return "none"
	}
	c, err := client.Connect(s.Addr(), "app", "apppw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := count()
	if _, err := c.Execute("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before {
		t.Fatalf("SELECT 1 moved the server-error count: %s -> %s", before, after)
	}
	_, err = c.Execute("select $$")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_PARSE_ERROR {
		t.Fatalf("select $$: %v, want MySQL's 1064", err)
	}
	if after := count(); !strings.HasSuffix(after, " 1") || before != "none" {
		t.Fatalf("after the probe: %s (before %s), want one refusal counted", after, before)
	}
}

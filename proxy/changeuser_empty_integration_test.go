package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose"
)

// changeUserLib is COM_CHANGE_USER to user with an empty password,
// exactly as libmysqlclient sends it: the plugin's first answer in the
// command (caching_sha2_password: one NUL byte; mysql_native_password:
// none), the same answer to the authentication switch, and no fast-auth
// or full-authentication exchange after it (the client reads the OK).
func (r *rawConn) changeUserLib(t *testing.T, user, db, plugin string) answer {
	t.Helper()
	var empty []byte
	if plugin == mysql.AUTH_CACHING_SHA2_PASSWORD {
		empty = []byte{0}
	}
	r.write(0, append([]byte{mysql.COM_CHANGE_USER}, changeUserPayload(user, empty, db, 255, plugin)...))
	seq, p, err := r.read()
	if err != nil {
		t.Fatalf("COM_CHANGE_USER: %v", err)
	}
	if len(p) > 0 && p[0] == mysql.EOF_HEADER {
		name, _, _ := bytes.Cut(p[1:], []byte{0})
		resp := []byte{}
		if string(name) == mysql.AUTH_CACHING_SHA2_PASSWORD {
			resp = []byte{0}
		}
		r.write(seq+1, resp)
		if seq, p, err = r.read(); err != nil {
			return answer{kind: "closed"}
		}
	}
	return classifyAnswer(seq, p)
}

// TestChangeUserEmptyPassword (issue 39, defect 3): COM_CHANGE_USER to an
// account with an empty password, as libmysqlclient sends it, is served
// under auth mapped (a proxy user without a password, both plugins) and
// passthrough (a MySQL account without one, plain and multiplexed): the
// proxy refused libmysqlclient's one NUL byte with 1045.
func TestChangeUserEmptyPassword(t *testing.T) {
	t.Run("mapped", func(t *testing.T) {
		s := startProxy(t, func(c *Config) {
			c.Users = append(c.Users, User{Name: "appnopw"})
		})
		for _, plugin := range []string{mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD} {
			rc := rawLogin(t, s.Addr(), "app", "apppw", false)
			if a := rc.changeUserLib(t, "appnopw", "", plugin); a.kind != "ok" {
				t.Fatalf("%s: COM_CHANGE_USER to a user without a password: %v", plugin, a)
			}
			if v, _ := rc.value(t, "SELECT 7"); v != "7" {
				t.Fatalf("%s: after COM_CHANGE_USER: %q", plugin, v)
			}
			// A user with a password is still refused an empty answer.
			if a := rc.changeUserLib(t, "app", "", plugin); a.kind != "err" || a.code != mysql.ER_ACCESS_DENIED_ERROR {
				t.Fatalf("%s: empty answer for a user with a password: %v, want 1045", plugin, a)
			}
		}
	})
	identityAccounts(t)
	emptyAccount(t)
	for _, mux := range []bool{false, true} {
		t.Run(fmt.Sprintf("passthrough/multiplex=%v", mux), func(t *testing.T) {
			s := passthroughProxy(t, mux)
			rc := rawLogin(t, s.Addr(), "u1", "u1pw", true)
			if a := rc.changeUserLib(t, "unopw", "", mysql.AUTH_CACHING_SHA2_PASSWORD); a.kind != "ok" {
				t.Fatalf("COM_CHANGE_USER to an account without a password: %v", a)
			}
			if who, _ := rc.value(t, "SELECT CURRENT_USER()"); who != "unopw@%" {
				t.Fatalf("after COM_CHANGE_USER: %q, want unopw@%%", who)
			}
			rc = rawLogin(t, s.Addr(), "u1", "u1pw", true)
			if a := rc.changeUserLib(t, "u2", "", mysql.AUTH_CACHING_SHA2_PASSWORD); a.kind != "err" || a.code != mysql.ER_ACCESS_DENIED_ERROR {
				t.Fatalf("empty answer for an account with a password: %v, want 1045", a)
			}
		})
	}
}

// emptyAccount creates the MySQL account unopw without a password (on the
// primary; it waits until every replica has it). Idempotent.
func emptyAccount(t *testing.T) {
	t.Helper()
	p := topo.Primary()
	admin := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	mustExec(t, admin, "CREATE USER IF NOT EXISTS 'unopw'@'%' IDENTIFIED BY ''")
	mustExec(t, admin, "GRANT SELECT ON u1db.* TO 'unopw'@'%'")
	for _, r := range topo.Replicas() {
		rdb := sqlOpen(t, r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := rdb.QueryRow("SELECT COUNT(*) FROM mysql.user WHERE user = 'unopw'").Scan(&n); err == nil && n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s lacks unopw after 30 s", r.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestChangeUserEmptyPasswordLibmysqlclient: libmysqlclient itself
// (mysqltest's change_user, from the mtr root filesystem scripts/
// mtr-suite.sh builds; skipped without it) changes to a proxy user
// without a password and back (it was refused with 1045).
func TestChangeUserEmptyPasswordLibmysqlclient(t *testing.T) {
	rootfs := filepath.Join(compose.DefaultCacheDir(), "mtr-rootfs")
	bin := "/usr/lib/mysql-test/bin/mysqltest"
	if _, err := os.Stat(rootfs + bin); err != nil {
		t.Skipf("no mysqltest in %s: %v", rootfs, err)
	}
	s := startProxy(t, func(c *Config) { c.Users = append(c.Users, User{Name: "appnopw"}) })
	host, port, _ := net.SplitHostPort(s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "chroot", rootfs, bin, "--host="+host, "--port="+port,
		"--user=app", "--password=apppw", "--protocol=tcp", "--ssl-mode=REQUIRED")
	cmd.Stdin = strings.NewReader("--change_user appnopw,,\nSELECT 'as appnopw' AS x;\n--change_user app,apppw,\nSELECT 'as app' AS x;\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "as appnopw") || !strings.Contains(string(out), "as app\n") {
		t.Fatalf("mysqltest change_user: %v\n%s", err, out)
	}
}

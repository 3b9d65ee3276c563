package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			Replicas: []Backend{{Addr: "127.0.0.1:3307"}}}
	}
	c := good()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Listen == "" || c.AuthMethod != "caching_sha2_password" || c.Policy != "token-wait" || c.Epoch != 1 ||
		c.Replicas[0].Name != "replica1" || c.MaxAllowedPacket != 64<<20 || c.PollInterval != 5*time.Millisecond || c.SocketIO != "raw" || c.WatermarkSource != "lazy" || c.GOMAXPROCS != "fixed" {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if c.MaxConnections != 1000 || c.HandshakeTimeout != 10*time.Second || c.IdleTimeout != 8*time.Hour ||
		c.ClientReadTimeout != 30*time.Second || c.ClientWriteTimeout != time.Minute ||
		c.MaxSessionBytes != 64<<20 || c.MaxTokenBytes != 64<<10 || c.BackendTimeout != time.Hour {
		t.Fatalf("limits' defaults not filled: %+v", c)
	}
	if c.Auth != AuthMapped {
		t.Fatalf("auth with users: %q, want mapped", c.Auth)
	}
	pt := good()
	pt.Users = nil
	if err := pt.validate(); err != nil || pt.Auth != AuthPassthrough || pt.MaxUserConnections != 750 {
		t.Fatalf("no users: %v, auth %q, max_user_connections %d; want passthrough, 750", err, pt.Auth, pt.MaxUserConnections)
	}
	bad := map[string]func(*Config){
		"no users":          func(c *Config) { c.Users, c.Auth = nil, AuthMapped },
		"auth mode":         func(c *Config) { c.Auth = "trust" },
		"users passthrough": func(c *Config) { c.Auth = AuthPassthrough },
		"passthrough native": func(c *Config) {
			c.Users, c.Auth, c.AuthMethod = nil, AuthPassthrough, "mysql_native_password"
		},
		"backend user half": func(c *Config) { c.Users[0].BackendUser = "x" },
		"dup user":          func(c *Config) { c.Users = append(c.Users, c.Users[0]) },
		"auth":              func(c *Config) { c.AuthMethod = "plain" },
		"no primary":        func(c *Config) { c.Primary.Addr = "" },
		"replica addr":      func(c *Config) { c.Replicas[0].Addr = "" },
		"policy":            func(c *Config) { c.Policy = "fastest" },
		"wait":              func(c *Config) { c.WaitBudget = -time.Second },
		"cap":               func(c *Config) { c.FallbackPerSecond = -1 },
		"packet":            func(c *Config) { c.MaxAllowedPacket = 10 },
		"tls half":          func(c *Config) { c.TLSCert = "x" },
		"dup name":          func(c *Config) { c.Replicas[0].Name = "primary" },
		"poll":              func(c *Config) { c.PollInterval = -1 },
		"poll 500us":        func(c *Config) { c.PollInterval = 500 * time.Microsecond },
		"poll idle <":       func(c *Config) { c.PollIdleInterval = time.Millisecond },
		"poll idle <0":      func(c *Config) { c.PollIdleInterval = -time.Second },
		"poll idle 2m":      func(c *Config) { c.PollIdleInterval = 2 * time.Minute },
		"positions":         func(c *Config) { c.Positions = "gossip" },
		"wait method":       func(c *Config) { c.Wait = "sleep" },
		"socket io":         func(c *Config) { c.SocketIO = "uring" },
		"gomaxprocs":        func(c *Config) { c.GOMAXPROCS = "2" },
		"watermark":         func(c *Config) { c.WatermarkSource = "ALL_GTIDS" },
		"lazy binlog":       func(c *Config) { c.WatermarkSource, c.Positions = "lazy", "binlog" },
		"connections":       func(c *Config) { c.MaxConnections = -1 },
		"handshake":         func(c *Config) { c.HandshakeTimeout = -time.Second },
		"idle":              func(c *Config) { c.IdleTimeout = time.Microsecond },
		"session":           func(c *Config) { c.MaxSessionBytes = 100 },
		"token":             func(c *Config) { c.MaxTokenBytes = -5 },
		"read timeout":      func(c *Config) { c.ClientReadTimeout = -1 },
		"backend 1ms":       func(c *Config) { c.BackendTimeout = time.Millisecond },
		"backend <0":        func(c *Config) { c.BackendTimeout = -time.Hour },
	}
	for name, mod := range bad {
		c := good()
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConfigPollIdleInterval: poll_idle_interval defaults to 100ms, or to
// poll_interval when that is longer (every poll fast, as before); a value
// equal to poll_interval is kept (always fast). The pollers take it, but
// the primary's polls every poll_interval with global_source view (its
// view is global's target there).
func TestConfigPollIdleInterval(t *testing.T) {
	for _, c := range []struct{ poll, idle, want time.Duration }{
		{0, 0, DefaultPollIdleInterval},
		{250 * time.Millisecond, 0, 250 * time.Millisecond},
		{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		{10 * time.Millisecond, time.Second, time.Second},
	} {
		cfg := Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			Replicas: []Backend{{Addr: "127.0.0.1:3307"}}, PollInterval: c.poll, PollIdleInterval: c.idle}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.PollIdleInterval != c.want {
			t.Errorf("poll %v, idle %v: idle %v, want %v", c.poll, c.idle, cfg.PollIdleInterval, c.want)
		}
	}
	for _, global := range []string{"primary-query", "view"} {
		cfg := Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			Replicas: []Backend{{Addr: "127.0.0.1:3307"}}, GlobalSource: global}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		p, err := newPollers(&cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, idle := p.byName["replica1"].Intervals(); idle != DefaultPollIdleInterval {
			t.Errorf("%s: replica idle interval %v", global, idle)
		}
		_, idle := p.byName["primary"].Intervals()
		if want := map[string]time.Duration{"primary-query": DefaultPollIdleInterval, "view": 0}[global]; idle != want {
			t.Errorf("%s: primary idle interval %v, want %v", global, idle, want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.yaml")
	os.WriteFile(p, []byte("listen: 127.0.0.1:7000\nusers: [{name: app, password: x}]\nprimary: {addr: 127.0.0.1:3306, user: u, password: pw}\nwait_budget: 250ms\n"), 0o600)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" || c.WaitBudget != 250*time.Millisecond || c.Primary.Password != "pw" {
		t.Fatalf("loaded %+v", c)
	}
	os.WriteFile(p, []byte("listne: x\n"), 0o600)
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "listne") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestBackendErrScrubsCredentials(t *testing.T) {
	b := &Backend{Name: "primary", User: "secretuser", Password: "hunter2"}
	e := backendErr(b, "connect", errString("dial as 'secretuser' with hunter2 failed"))
	if strings.Contains(e.Error(), "hunter2") || strings.Contains(e.Error(), "secretuser") {
		t.Fatalf("credentials leak: %v", e)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestPoolShare: the workers' shares of pool_size add up to it and differ
// by at most one; an unset pool_size shares the default; fewer
// connections than workers is refused.
func TestPoolShare(t *testing.T) {
	for _, c := range []struct{ size, n int }{{64, 2}, {64, 3}, {7, 7}, {10, 4}, {0, 5}, {1, 1}} {
		total, lo, hi := 0, 1<<30, 0
		for i := range c.n {
			s, err := PoolShare(c.size, c.n, i)
			if err != nil {
				t.Fatalf("PoolShare(%d, %d, %d): %v", c.size, c.n, i, err)
			}
			total += s
			lo, hi = min(lo, s), max(hi, s)
		}
		want := c.size
		if want == 0 {
			want = DefaultPoolSize
		}
		if total != want || hi-lo > 1 || lo < 1 {
			t.Errorf("pool_size %d over %d workers: shares add up to %d (want %d), from %d to %d", c.size, c.n, total, want, lo, hi)
		}
	}
	if _, err := PoolShare(2, 3, 0); err == nil || !strings.Contains(err.Error(), "pool_size 2 is smaller than workers 3") {
		t.Errorf("pool_size 2 over 3 workers: %v", err)
	}
}

// TestConfigFairnessDefaults: the fairness bounds' defaults (issue 38)
// and their ranges.
func TestConfigFairnessDefaults(t *testing.T) {
	base := func(users ...string) Config {
		c := Config{Primary: Backend{Addr: "127.0.0.1:3306"}}
		for _, u := range users {
			c.Users = append(c.Users, User{Name: u, Password: "pw"})
		}
		return c
	}
	one := base("app")
	if err := one.validate(); err != nil {
		t.Fatal(err)
	}
	if one.MaxUserConnections != one.MaxConnections {
		t.Errorf("one user: max_user_connections %d, want max_connections %d", one.MaxUserConnections, one.MaxConnections)
	}
	two := base("app", "report")
	if err := two.validate(); err != nil {
		t.Fatal(err)
	}
	if two.MaxUserConnections != 750 {
		t.Errorf("two users: max_user_connections %d, want 750 (3/4 of max_connections)", two.MaxUserConnections)
	}
	if one.MaxHandshakes != one.MaxConnections || one.MaxSessionPreparedStatements != 1024 ||
		one.MaxTotalSessionBytes != 1<<30 || one.IdleInTransactionTimeout != 15*time.Minute || one.MaxPinnedShare != 0.75 {
		t.Errorf("fairness defaults not filled: %+v", one)
	}
	if got := one.maxPinned(); got != 48 {
		t.Errorf("max pinned of pool_size 64 at 0.75: %d, want 48", got)
	}
	one.PoolSize = 1
	if got := one.maxPinned(); got != 1 {
		t.Errorf("max pinned of pool_size 1: %d, want 1 (at least one)", got)
	}
	for name, mod := range map[string]func(*Config){
		"user connections past max_connections": func(c *Config) { c.MaxUserConnections = c.MaxConnections + 1 },
		"negative user connections":             func(c *Config) { c.MaxUserConnections = -1 },
		"handshakes":                            func(c *Config) { c.MaxHandshakes = -1 },
		"prepared statements":                   func(c *Config) { c.MaxSessionPreparedStatements = 5 << 20 },
		"total session bytes":                   func(c *Config) { c.MaxTotalSessionBytes = 100 },
		"idle in transaction":                   func(c *Config) { c.IdleInTransactionTimeout = time.Microsecond },
		"pinned share > 1":                      func(c *Config) { c.MaxPinnedShare = 1.5 },
		"pinned share < 0":                      func(c *Config) { c.MaxPinnedShare = -0.1 },
	} {
		c := base("app", "report")
		c.MaxConnections = 100
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConfigTokenKeys: accept_unsigned_tokens defaults to true without
// token_keys and false with them; a bad key is refused naming it.
func TestConfigTokenKeys(t *testing.T) {
	base := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"}}
	}
	c := base()
	if err := c.validate(); err != nil || !*c.AcceptUnsignedTokens {
		t.Fatalf("no keys: %v, accept_unsigned_tokens %v; want true", err, *c.AcceptUnsignedTokens)
	}
	c = base()
	c.TokenKeys = []TokenKey{{ID: "k1", Secret: strings.Repeat("s", 32)}}
	if err := c.validate(); err != nil || *c.AcceptUnsignedTokens {
		t.Fatalf("with keys: %v, accept_unsigned_tokens %v; want false", err, *c.AcceptUnsignedTokens)
	}
	for _, k := range []TokenKey{{ID: "k1", Secret: "short"}, {ID: "K 1", Secret: strings.Repeat("s", 32)}} {
		c = base()
		c.TokenKeys = []TokenKey{k}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "token_keys") {
			t.Errorf("key %+v: %v, want a token_keys error", k, err)
		}
	}
}

// TestCapShare: the fallback cap is split across the fleet's proxies and
// each proxy's workers; 0 stays no cap.
func TestCapShare(t *testing.T) {
	for _, c := range []struct {
		perSecond      float64
		fleet, workers int
		want           float64
	}{{100, 0, 0, 100}, {100, 4, 1, 25}, {120, 3, 2, 20}, {0, 3, 2, 0}} {
		cfg := Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			FallbackPerSecond: c.perSecond, FleetMembers: c.fleet, Workers: c.workers}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.capShare(); got != c.want {
			t.Errorf("%v per second, %d members, %d workers: share %v, want %v", c.perSecond, c.fleet, c.workers, got, c.want)
		}
	}
	bad := Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"}, FleetMembers: 2000}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "fleet_members") {
		t.Errorf("fleet_members 2000: %v", err)
	}
}

// TestConfigFailover: discover defaults to roles every second; a bad
// mode, interval or short admin token is refused, naming the key.
func TestConfigFailover(t *testing.T) {
	base := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"}}
	}
	c := base()
	if err := c.validate(); err != nil || c.Discover != "roles" || c.DiscoverInterval != time.Second || c.AdminToken != "" {
		t.Fatalf("defaults: %v, discover %q every %v, admin_token %q", err, c.Discover, c.DiscoverInterval, c.AdminToken)
	}
	for key, mod := range map[string]func(*Config){
		"discover":          func(c *Config) { c.Discover = "gossip" },
		"discover_interval": func(c *Config) { c.DiscoverInterval = time.Millisecond },
		"admin_token":       func(c *Config) { c.AdminToken = "short" },
	} {
		c := base()
		mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("bad %s: %v, want an error naming it", key, err)
		}
	}
}

// TestConfigEngine: engine defaults to mysql; on mariadb the watermark
// defaults to query, and what reads MySQL's binary log, received set or
// ALL_GTIDS tracking is refused by name; the primary's version must
// agree with the engine.
func TestConfigEngine(t *testing.T) {
	base := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Name: "primary", Addr: "127.0.0.1:3306"}}
	}
	c := base()
	if err := c.validate(); err != nil || c.Engine != EngineMySQL || c.WatermarkSource != "lazy" || c.flavor().Name() != "mysql-gtid" {
		t.Fatalf("defaults: %v, engine %q, watermark_source %q", err, c.Engine, c.WatermarkSource)
	}
	c = base()
	c.Engine = EngineMariaDB
	if err := c.validate(); err != nil || c.WatermarkSource != "query" || c.flavor().Name() != "mariadb-gtid" ||
		!strings.Contains(c.trackSetup(false), "last_gtid") {
		t.Fatalf("mariadb: %v, watermark_source %q, flavor %s", err, c.WatermarkSource, c.flavor().Name())
	}
	for key, mod := range map[string]func(*Config){
		"engine":           func(c *Config) { c.Engine = "postgres" },
		"positions":        func(c *Config) { c.Engine, c.Positions = EngineMariaDB, "binlog" },
		"wait":             func(c *Config) { c.Engine, c.Wait = EngineMariaDB, "watcher" },
		"watermark_source": func(c *Config) { c.Engine, c.WatermarkSource = EngineMariaDB, "all-gtids" },
	} {
		c := base()
		mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("bad %s: %v, want an error naming it", key, err)
		}
	}
	c = base()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if err := c.checkEngine("11.8.3-MariaDB-1 from Debian"); err == nil || !strings.Contains(err.Error(), "set engine: mariadb") {
		t.Errorf("engine mysql, MariaDB's version: %v", err)
	}
	if err := c.checkEngine("9.7.0"); err != nil {
		t.Errorf("engine mysql, MySQL's version: %v", err)
	}
	c.Engine = EngineMariaDB
	if err := c.checkEngine("9.7.0"); err == nil || !strings.Contains(err.Error(), "set engine: mysql") {
		t.Errorf("engine mariadb, MySQL's version: %v", err)
	}
}

// TestConfigWatchers: positions watchers needs watchers naming backends
// with host:port addresses; watchers without it are refused.
func TestConfigWatchers(t *testing.T) {
	base := func() Config {
		return Config{Users: []User{{Name: "a", Password: "b"}}, Primary: Backend{Addr: "127.0.0.1:3306"},
			Replicas: []Backend{{Name: "r1", Addr: "127.0.0.1:3307"}}}
	}
	c := base()
	c.Positions, c.Watchers = "watchers", map[string]string{"r1": "127.0.0.1:6020"}
	if err := c.validate(); err != nil || c.WatermarkSource != "query" {
		t.Fatalf("watchers: %v, watermark_source %q", err, c.WatermarkSource)
	}
	for what, mod := range map[string]func(*Config){
		"no watchers":      func(c *Config) { c.Positions = "watchers" },
		"unknown backend":  func(c *Config) { c.Positions, c.Watchers = "watchers", map[string]string{"r9": "127.0.0.1:6020"} },
		"bad address":      func(c *Config) { c.Positions, c.Watchers = "watchers", map[string]string{"r1": "nowhere"} },
		"without watchers": func(c *Config) { c.Watchers = map[string]string{"r1": "127.0.0.1:6020"} },
		"lazy": func(c *Config) {
			c.Positions, c.Watchers, c.WatermarkSource = "watchers", map[string]string{"r1": "127.0.0.1:6020"}, "lazy"
		},
	} {
		c := base()
		mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "watchers") && !strings.Contains(err.Error(), "lazy") {
			t.Errorf("%s: %v, want an error naming watchers", what, err)
		}
	}
}

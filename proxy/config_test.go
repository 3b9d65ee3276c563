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
		c.Replicas[0].Name != "replica1" || c.MaxAllowedPacket != 64<<20 || c.PollInterval != 5*time.Millisecond || c.SocketIO != "raw" || c.WatermarkSource != "lazy" {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if c.MaxConnections != 1000 || c.HandshakeTimeout != 10*time.Second || c.IdleTimeout != 8*time.Hour ||
		c.ClientReadTimeout != 30*time.Second || c.ClientWriteTimeout != time.Minute ||
		c.MaxSessionBytes != 64<<20 || c.MaxTokenBytes != 64<<10 || c.BackendTimeout != time.Hour {
		t.Fatalf("limits' defaults not filled: %+v", c)
	}
	bad := map[string]func(*Config){
		"no users":     func(c *Config) { c.Users = nil },
		"dup user":     func(c *Config) { c.Users = append(c.Users, c.Users[0]) },
		"auth":         func(c *Config) { c.AuthMethod = "plain" },
		"no primary":   func(c *Config) { c.Primary.Addr = "" },
		"replica addr": func(c *Config) { c.Replicas[0].Addr = "" },
		"policy":       func(c *Config) { c.Policy = "fastest" },
		"wait":         func(c *Config) { c.WaitBudget = -time.Second },
		"cap":          func(c *Config) { c.FallbackPerSecond = -1 },
		"packet":       func(c *Config) { c.MaxAllowedPacket = 10 },
		"tls half":     func(c *Config) { c.TLSCert = "x" },
		"dup name":     func(c *Config) { c.Replicas[0].Name = "primary" },
		"poll":         func(c *Config) { c.PollInterval = -1 },
		"poll 500us":   func(c *Config) { c.PollInterval = 500 * time.Microsecond },
		"positions":    func(c *Config) { c.Positions = "gossip" },
		"wait method":  func(c *Config) { c.Wait = "sleep" },
		"socket io":    func(c *Config) { c.SocketIO = "uring" },
		"watermark":    func(c *Config) { c.WatermarkSource = "ALL_GTIDS" },
		"lazy binlog":  func(c *Config) { c.WatermarkSource, c.Positions = "lazy", "binlog" },
		"connections":  func(c *Config) { c.MaxConnections = -1 },
		"handshake":    func(c *Config) { c.HandshakeTimeout = -time.Second },
		"idle":         func(c *Config) { c.IdleTimeout = time.Microsecond },
		"session":      func(c *Config) { c.MaxSessionBytes = 100 },
		"token":        func(c *Config) { c.MaxTokenBytes = -5 },
		"read timeout": func(c *Config) { c.ClientReadTimeout = -1 },
		"backend 1ms":  func(c *Config) { c.BackendTimeout = time.Millisecond },
		"backend <0":   func(c *Config) { c.BackendTimeout = -time.Hour },
	}
	for name, mod := range bad {
		c := good()
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
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

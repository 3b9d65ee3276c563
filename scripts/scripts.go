// Package scripts embeds the shell scripts causallab runs, so that the
// binary (`causallab image`) and make/CI (`scripts/ensure-engine.sh`, which
// `scripts/ensure-mysql.sh` calls) run one and the same source.
package scripts

import _ "embed"

//go:embed ensure-engine.sh
var ensureEngine string

// EnsureEngine returns the text of ensure-engine.sh; run it with the
// engine's name (mysql, mariadb, postgres) as its argument.
func EnsureEngine() string { return ensureEngine }

// Package scripts embeds the shell scripts causallab runs, so that the
// binary (`causallab image`) and make/CI (`scripts/ensure-mysql.sh`) run
// one and the same source.
package scripts

import _ "embed"

//go:embed ensure-mysql.sh
var ensureMySQL string

// EnsureMySQL returns the text of ensure-mysql.sh.
func EnsureMySQL() string { return ensureMySQL }

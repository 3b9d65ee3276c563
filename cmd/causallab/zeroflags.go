package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Numeric flags whose zero the libraries read as "the default" (their
// configs' zero values): given on the command line, 0 would run the
// default in silence (--sessions 0 ran 2000 sessions, exit 0). They refuse
// it instead (exit 2), naming the smallest value they take. Flags whose
// zero means something (sim --poll 0: a perfect view; --cap 0: no cap;
// lab gated --trials 0: no sweep; --op-gap 0: no pause; up --replicas 0: a
// primary alone) are not listed.

// defaultIfZero is a flag that refuses an explicit 0, and its default in
// words when its flag default is 0 (the library picks it: "the
// experiment's, 16").
type defaultIfZero struct {
	name string
	def  string
}

// simZeroDefaults are every sim experiment's.
var simZeroDefaults = []defaultIfZero{{"seed", "the experiment's: 1, or 20260802 for workorder"},
	{"trials", "the experiment's, 16"}, {"replicas", "5"}, {"writes-per-sec", "the experiment's, 600"},
	{"sessions", "800 under chains, 10000 under queue"}, {"duration", "16s"}, {"window", "500ms"}, {"budget", "400ms"}}

// labZeroDefaults are every lab experiment's (labFlags).
var labZeroDefaults = []defaultIfZero{{name: "replicas"}, {name: "sessions"}, {name: "hot-rows"}, {name: "write-rate"},
	{name: "duration"}, {name: "reads-per-write"}, {name: "seed"}, {name: "workers"}, {name: "poll"},
	{name: "drift-load"}, {name: "every"}}

// gatedZeroDefaults are `lab gated --engine`'s own.
var gatedZeroDefaults = []defaultIfZero{{"apply-delay", "250ms on postgres, 1s on mysql and mariadb"}, {name: "reads"},
	{"sweep-max", "twice the apply delay on postgres, three times on mysql and mariadb"}, {"sweep-step", "--sweep-max/20"}}

// refuseZero returns a usage error for the first flag of fs that was
// given as 0 on the command line.
func refuseZero(cmd *cobra.Command, flags ...[]defaultIfZero) error {
	for _, list := range flags {
		for _, z := range list {
			fl := cmd.Flags().Lookup(z.name)
			if fl == nil || !fl.Changed || !isZero(fl) {
				continue
			}
			def := z.def
			if def == "" {
				def = fl.DefValue
			}
			return usageErrorf("--%s %s: want %s (leave it out for the default, %s)", z.name, fl.Value.String(), smallest(fl), def)
		}
	}
	return nil
}

// isZero reports whether a numeric flag's value is zero.
func isZero(fl *pflag.Flag) bool {
	v := fl.Value.String()
	if fl.Value.Type() == "duration" {
		d, err := time.ParseDuration(v)
		return err == nil && d == 0
	}
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && f == 0
}

// smallest says the smallest value a flag takes, as its type has it.
func smallest(fl *pflag.Flag) string {
	switch fl.Value.Type() {
	case "int", "int64", "uint", "uint64", "int32", "uint32":
		return "1 or more"
	case "duration":
		return "a duration above 0s"
	}
	return "a value above 0"
}

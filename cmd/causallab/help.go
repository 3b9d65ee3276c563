package main

import (
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/sim"
)

// termWidth is the width every command's default output fits: help
// texts, tables (sim.TermWidth) and the lines commands print.
const termWidth = 80

// helpTemplate is cobra's help template with the description folded to
// termWidth.
const helpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces | fold}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}`

// usageTemplate is cobra's usage template (v1.10) with every line folded
// to termWidth: the use line, each command's one-line description (its
// continuation aligned under it), the flags (pflag's own wrapping) and,
// last, the exit codes every command shares.
const usageTemplate = `Usage:{{if .Runnable}}
{{indent 2 .UseLine | fold}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example | fold}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Available Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
{{entry .Name .NamePadding .Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
{{entry .Name .NamePadding .Short}}{{end}}{{end}}{{end}}{{if not .AllChildCommandsHaveGroup}}

Additional Commands:{{range $cmds}}{{if (and (eq .GroupID "") (or .IsAvailableCommand (eq .Name "help")))}}
{{entry .Name .NamePadding .Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsagesWrapped 80 | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsagesWrapped 80 | trimTrailingWhitespaces}}{{end}}{{if .HasHelpSubCommands}}

Additional help topics:{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
{{entry .CommandPath .CommandPathPadding .Short}}{{end}}{{end}}{{end}}{{if .HasAvailableSubCommands}}

{{printf "Use %q for more information about a command." (printf "%s [command] --help" .CommandPath) | fold}}{{end}}

` + exitCodes + `
`

// setHelpTemplates makes root's help and usage (and its commands')
// fit termWidth.
func setHelpTemplates(root *cobra.Command) {
	cobra.AddTemplateFuncs(template.FuncMap{
		"fold":   func(s string) string { return fold(s, termWidth) },
		"indent": func(n int, s string) string { return strings.Repeat(" ", n) + s },
		"entry":  entry,
	})
	root.SetHelpTemplate(helpTemplate)
	root.SetUsageTemplate(usageTemplate)
}

// entry is one line of a command list: "  name   description", the
// description folded under itself.
func entry(name string, padding int, short string) string {
	head := "  " + name + strings.Repeat(" ", max(padding-utf8.RuneCountInString(name), 0)) + " "
	hang := strings.Repeat(" ", utf8.RuneCountInString(head))
	room := max(termWidth-len(hang), 20)
	lines := sim.Wrap(short, room)
	if len(lines) == 0 {
		return strings.TrimRight(head, " ")
	}
	return head + strings.Join(lines, "\n"+hang)
}

// fold breaks every line of s wider than width at spaces, each
// continuation indented as its line was; lines that fit are kept as they
// are (hand-made layouts stay).
func fold(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if utf8.RuneCountInString(line) <= width {
			out = append(out, line)
			continue
		}
		ind := line[:len(line)-len(strings.TrimLeft(line, " "))]
		for _, l := range sim.Wrap(strings.TrimLeft(line, " "), max(width-len(ind), 20)) {
			out = append(out, ind+l)
		}
	}
	return strings.Join(out, "\n")
}

package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Column describes one table column.
type Column struct {
	// Key is the machine name (CSV header, JSON key): lower_snake_case.
	Key string
	// Header is the markdown header.
	Header string
	// Prec is the number of decimals printed (markdown and CSV).
	Prec int
}

// Cell is one table value: a label, a number with an optional spread, or a
// number that is missing (NA).
type Cell struct {
	// Label is the text of a label cell (IsNum false).
	Label string
	// Num is the value of a numeric cell (IsNum true).
	Num   float64
	IsNum bool
	// SD is the sample standard deviation over trials (HasSD true).
	SD    float64
	HasSD bool
	// Missing marks a number that does not exist for this row: "–" in
	// markdown, an empty CSV cell, null in JSON.
	Missing bool
}

// NA is a missing numeric cell.
func NA() Cell { return Cell{Missing: true} }

// L is a label cell.
func L(s string) Cell { return Cell{Label: s} }

// N is a numeric cell without spread.
func N(v float64) Cell { return Cell{Num: v, IsNum: true} }

// S is a numeric cell with its spread over trials.
func S(s Stat) Cell { return Cell{Num: s.Mean, SD: s.SD, IsNum: true, HasSD: true} }

// Table is one experiment's result.
type Table struct {
	// Name is the experiment's machine name ("routers", "window", ...).
	Name string
	// Title is the markdown heading.
	Title   string
	Columns []Column
	Rows    [][]Cell
	// Notes are printed under the table: the setup and the achieved lag.
	Notes []string
	// Brief is the table's compact view, what a terminal shows by default
	// (Compact): these columns only, in this order. Empty: the table has
	// no compact view (it is narrow enough as it is).
	Brief []BriefColumn
	// BriefNotes replace Notes in the compact view (nil: Notes).
	BriefNotes []string
}

// BriefColumn is one column of a table's compact view.
type BriefColumn struct {
	// Key is the full table's column shown.
	Key string
	// Header is the compact header (empty: the column's own).
	Header string
	// SD keeps the cell's ± spread (it is dropped otherwise).
	SD bool
	// Pair is a second column's key shown in the same cell as "a/b"
	// (the lab's figure beside the simulator's).
	Pair string
}

// TermWidth is the terminal width the compact views fit.
const TermWidth = 80

// Compact returns t's compact view, what a terminal shows by default: the
// Brief columns (every column, spreads dropped, when Brief is empty), as
// many of them from the left as fit TermWidth, and BriefNotes (or Notes)
// wrapped to TermWidth, with a note naming the columns left out. A table
// that fits as it is keeps every column (its notes wrapped).
func (t *Table) Compact() *Table {
	title, titleNote := fitTitle(t.Title)
	if len(t.Brief) == 0 && t.width() <= TermWidth {
		c := *t
		c.Title, c.Notes = title, nil
		for _, n := range append(titleNote, t.Notes...) {
			c.Notes = append(c.Notes, Wrap(n, TermWidth)...)
		}
		return &c
	}
	brief := t.Brief
	if len(brief) == 0 {
		for _, c := range t.Columns {
			brief = append(brief, BriefColumn{Key: c.Key})
		}
	}
	idx := map[string]int{}
	for i, c := range t.Columns {
		idx[c.Key] = i
	}
	c := &Table{Name: t.Name, Title: title, Rows: make([][]Cell, len(t.Rows))}
	shown := map[string]bool{}
	for _, b := range brief {
		i, ok := idx[b.Key]
		if !ok {
			continue
		}
		col := t.Columns[i]
		if b.Header != "" {
			col.Header = b.Header
		}
		j, paired := idx[b.Pair]
		next := &Table{Columns: append(slices.Clone(c.Columns), col), Rows: make([][]Cell, len(t.Rows))}
		for r, row := range t.Rows {
			cell := row[i]
			if !b.SD {
				cell.HasSD, cell.SD = false, 0
			}
			if paired {
				cell = L(cellText(row[i], col.Prec, false) + "/" + cellText(row[j], t.Columns[j].Prec, false))
			}
			next.Rows[r] = append(slices.Clone(c.Rows[r]), cell)
		}
		if len(c.Columns) > 0 && next.width() > TermWidth {
			break
		}
		c.Columns, c.Rows = next.Columns, next.Rows
		shown[b.Key], shown[b.Pair] = true, true
	}
	notes := t.BriefNotes
	if notes == nil {
		notes = t.Notes
	}
	var left []string
	for _, col := range t.Columns {
		if !shown[col.Key] {
			left = append(left, col.Header)
		}
	}
	if t.BriefNotes == nil {
		if len(left) > 0 {
			notes = append(slices.Clone(notes), "Left out here (--wide shows them, and every ± spread): "+strings.Join(left, ", ")+".")
		} else {
			notes = append(slices.Clone(notes), "Every ± spread: --wide.")
		}
	}
	for _, n := range append(titleNote, notes...) {
		c.Notes = append(c.Notes, Wrap(n, TermWidth)...)
	}
	return c
}

// fitTitle fits a title to a markdown heading ("### " + title) of at most
// TermWidth columns. A title that does not fit keeps its head, up to its
// first ": " ("Futile waits"), and its rest opens the notes ("Budget 50ms
// on lagging replicas (and ...)."); one without such a head keeps the
// words that fit, and the whole title opens the notes.
func fitTitle(title string) (string, []string) {
	const room = TermWidth - len("### ")
	if len([]rune(title)) <= room {
		return title, nil
	}
	if head, rest, ok := strings.Cut(title, ": "); ok && len([]rune(head)) <= room && rest != "" {
		r := []rune(rest)
		note := strings.ToUpper(string(r[0])) + string(r[1:])
		if !strings.HasSuffix(note, ".") {
			note += "."
		}
		return head, []string{note}
	}
	head := []rune(Wrap(title, room-1)[0])
	return string(head[:min(len(head), room-1)]) + "…", []string{title}
}

// width is the widest line of t's markdown rows (header included).
func (t *Table) width() int {
	w := 1
	for _, c := range t.Columns {
		w += len([]rune(c.Header)) + 3
	}
	for _, row := range t.Rows {
		rw := 1
		for i, c := range row {
			rw += len([]rune(cellText(c, t.Columns[i].Prec, true))) + 3
		}
		w = max(w, rw)
	}
	return w
}

// cellText is a cell as markdown shows it.
func cellText(c Cell, prec int, sd bool) string {
	switch {
	case c.Missing:
		return "–"
	case !c.IsNum:
		return c.Label
	case c.HasSD && sd:
		return num(c.Num, prec) + " ± " + num(c.SD, prec)
	}
	return num(c.Num, prec)
}

// Wrap breaks s into lines of at most width characters at spaces (a word
// longer than width gets a line of its own).
func Wrap(s string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, w := range strings.Fields(s) {
		if cur.Len() > 0 && len([]rune(cur.String()))+1+len([]rune(w)) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// Format is an output format.
type Format string

const (
	FormatMarkdown Format = "md"
	FormatCSV      Format = "csv"
	FormatJSON     Format = "json"
)

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatMarkdown, FormatCSV, FormatJSON:
		return Format(s), nil
	}
	return "", fmt.Errorf("sim: unknown format %q (want md, csv or json)", s)
}

// Write renders t in format f.
func (t *Table) Write(w io.Writer, f Format) error {
	switch f {
	case FormatCSV:
		return t.writeCSV(w)
	case FormatJSON:
		return t.writeJSON(w)
	default:
		return t.writeMarkdown(w)
	}
}

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func (t *Table) writeMarkdown(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "### %s\n\n|", t.Title)
	for _, c := range t.Columns {
		fmt.Fprintf(&b, " %s |", c.Header)
	}
	b.WriteString("\n|")
	for i := range t.Columns {
		if i == 0 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		b.WriteString("|")
		for i, c := range row {
			fmt.Fprintf(&b, " %s |", cellText(c, t.Columns[i].Prec, true))
		}
		b.WriteString("\n")
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "%s\n", n)
		}
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// csvNum is a number as CSV has it: a whole number as an integer (counts:
// 1482, not 1482.00), others with two decimals more than markdown shows,
// and a number that does not exist (NaN, infinite) as an empty cell.
func csvNum(v float64, prec int) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return ""
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', prec+2, 64)
}

// writeCSV writes a header row then one row per table row; a column with a
// spread gets a second column KEY_sd. Notes become "# " comment lines first.
// Missing numbers are empty cells.
func (t *Table) writeCSV(w io.Writer) error {
	var b bytes.Buffer
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "# %s\n", strings.ReplaceAll(n, "\n", " "))
	}
	cw := csv.NewWriter(&b)
	sd := t.sdColumns()
	hdr := []string{"table"}
	for i, c := range t.Columns {
		hdr = append(hdr, c.Key)
		if sd[i] {
			hdr = append(hdr, c.Key+"_sd")
		}
	}
	_ = cw.Write(hdr)
	for _, row := range t.Rows {
		rec := []string{t.Name}
		for i, c := range row {
			switch {
			case c.Missing:
				rec = append(rec, "")
			case c.IsNum:
				rec = append(rec, csvNum(c.Num, t.Columns[i].Prec))
			default:
				rec = append(rec, c.Label)
			}
			if sd[i] {
				if c.HasSD {
					rec = append(rec, csvNum(c.SD, t.Columns[i].Prec))
				} else {
					rec = append(rec, "")
				}
			}
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func (t *Table) sdColumns() []bool {
	sd := make([]bool, len(t.Columns))
	for _, row := range t.Rows {
		for i, c := range row {
			sd[i] = sd[i] || c.HasSD
		}
	}
	return sd
}

// writeJSON writes JSON lines: one object per table row, keys in column
// order, numbers as numbers (NaN as null), a spread as KEY_sd, plus "table".
func (t *Table) writeJSON(w io.Writer) error {
	var b bytes.Buffer
	sd := t.sdColumns()
	put := func(k string, v any) {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			vb = []byte("null")
		}
		b.WriteString(",")
		b.Write(kb)
		b.WriteString(":")
		b.Write(vb)
	}
	fnum := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	for _, row := range t.Rows {
		b.WriteString(`{"table":`)
		nb, _ := json.Marshal(t.Name)
		b.Write(nb)
		for i, c := range row {
			if c.Missing {
				put(t.Columns[i].Key, nil)
			} else if c.IsNum {
				put(t.Columns[i].Key, fnum(c.Num))
			} else {
				put(t.Columns[i].Key, c.Label)
			}
			if sd[i] {
				if c.HasSD {
					put(t.Columns[i].Key+"_sd", fnum(c.SD))
				} else {
					put(t.Columns[i].Key+"_sd", nil)
				}
			}
		}
		b.WriteString("}\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// HTMLHead is the head of the HTML reports (sim all --out, lab --out).
func HTMLHead(title string) string {
	return "<!doctype html><meta charset=utf-8><title>" + html.EscapeString(title) + "</title>\n" +
		"<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}" +
		"td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}</style>\n"
}

// WriteHTML writes t as an HTML table (every column, spreads as ±) with
// its notes as small paragraphs.
func (t *Table) WriteHTML(b *bytes.Buffer) {
	b.WriteString("<table><tr>")
	for _, c := range t.Columns {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(c.Header))
	}
	b.WriteString("</tr>\n")
	for _, row := range t.Rows {
		b.WriteString("<tr>")
		for i, c := range row {
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(cellText(c, t.Columns[i].Prec, true)))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	for _, n := range t.Notes {
		fmt.Fprintf(b, "<p><small>%s</small></p>\n", html.EscapeString(n))
	}
}

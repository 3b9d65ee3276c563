// Command pkggraph writes the package graph of docs/architecture.md from
// `go list`, so the picture and the table cannot drift from the code by
// hand: the import table between the page's pkggraph markers and the
// drawing docs/img/architecture.svg (its PNG beside it is rendered from
// the SVG with rsvg-convert when that is installed).
//
//	go run ./internal/tools/pkggraph        # from the module root
//
// The drawing is layered: a package sits above everything it imports. It
// shows the transitive reduction of the module's import graph (an edge
// implied by a longer path is left out); the table lists every direct
// import. Folders with tests only (compose/enginetest/...) are left out:
// nothing imports them.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	doc := flag.String("doc", "docs/architecture.md", "page whose pkggraph section is rewritten")
	svg := flag.String("svg", "docs/img/architecture.svg", "drawing to write")
	flag.Parse()
	if err := run(*doc, *svg); err != nil {
		fmt.Fprintln(os.Stderr, "pkggraph:", err)
		os.Exit(1)
	}
}

// listed is what pkggraph reads of `go list -json`.
type listed struct {
	ImportPath string
	GoFiles    []string
	Imports    []string
	Standard   bool
	Module     *struct{ Path string }
}

// Graph is the module's packages and their direct imports.
type Graph struct {
	Module string
	// Pkgs are the module's packages, relative to the module path.
	Pkgs []string
	// Internal[p] are p's direct imports inside the module (relative).
	Internal map[string][]string
	// External[p] are the modules outside this one that p imports
	// directly (the standard library left out).
	External map[string][]string
}

// Load runs go list over the whole module.
func Load() (*Graph, error) {
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	path, dir, _ := strings.Cut(strings.TrimSpace(string(mod)), " ")
	g := &Graph{Module: path, Internal: map[string][]string{}, External: map[string][]string{}}
	list := exec.Command("go", "list", "-deps", "-json", "./...")
	list.Dir = dir // the whole module, wherever this runs from
	// Imports differ by GOOS (internal/procs reads the affinity mask
	// through x/sys on Linux only): the page shows Linux's, on any host.
	list.Env = append(os.Environ(), "GOOS=linux")
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps -json ./...: %w", err)
	}
	moduleOf := map[string]string{}
	var own []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Module != nil {
			moduleOf[p.ImportPath] = p.Module.Path
		}
		if p.Module != nil && p.Module.Path == g.Module && len(p.GoFiles) > 0 {
			own = append(own, p) // test-only folders are left out
		}
	}
	for _, p := range own {
		name := g.rel(p.ImportPath)
		g.Pkgs = append(g.Pkgs, name)
		ext := map[string]bool{}
		for _, imp := range p.Imports {
			switch m := moduleOf[imp]; {
			case m == g.Module:
				g.Internal[name] = append(g.Internal[name], g.rel(imp))
			case m != "":
				ext[m] = true
			}
		}
		g.External[name] = slices.Sorted(mapKeys(ext))
		slices.Sort(g.Internal[name])
	}
	slices.Sort(g.Pkgs)
	return g, nil
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (g *Graph) rel(path string) string {
	if path == g.Module {
		return "."
	}
	return strings.TrimPrefix(path, g.Module+"/")
}

// Layers returns each package's layer: 0 for a package that imports none
// of the module's, else one more than the highest layer it imports.
func (g *Graph) Layers() map[string]int {
	layer := map[string]int{}
	var visit func(p string) int
	visit = func(p string) int {
		if l, ok := layer[p]; ok {
			return l
		}
		layer[p] = 0 // the module has no cycles (the compiler refuses them)
		l := 0
		for _, q := range g.Internal[p] {
			l = max(l, visit(q)+1)
		}
		layer[p] = l
		return l
	}
	for _, p := range g.Pkgs {
		visit(p)
	}
	return layer
}

// Reduced returns the transitive reduction of the internal edges.
func (g *Graph) Reduced() map[string][]string {
	reach := map[string]map[string]bool{}
	var closure func(p string) map[string]bool
	closure = func(p string) map[string]bool {
		if r, ok := reach[p]; ok {
			return r
		}
		r := map[string]bool{}
		for _, q := range g.Internal[p] {
			r[q] = true
			for k := range closure(q) {
				r[k] = true
			}
		}
		reach[p] = r
		return r
	}
	out := map[string][]string{}
	for _, p := range g.Pkgs {
		for _, q := range g.Internal[p] {
			implied := false
			for _, o := range g.Internal[p] {
				if o != q && closure(o)[q] {
					implied = true
					break
				}
			}
			if !implied {
				out[p] = append(out[p], q)
			}
		}
	}
	return out
}

// Table is the Markdown import table.
func (g *Graph) Table() string {
	var b strings.Builder
	b.WriteString("| package | imports (this module) | imports (other modules) |\n| --- | --- | --- |\n")
	layer := g.Layers()
	pkgs := slices.Clone(g.Pkgs)
	sort.SliceStable(pkgs, func(i, j int) bool {
		if layer[pkgs[i]] != layer[pkgs[j]] {
			return layer[pkgs[i]] > layer[pkgs[j]]
		}
		return pkgs[i] < pkgs[j]
	})
	for _, p := range pkgs {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p, codeList(g.Internal[p]), codeList(g.External[p]))
	}
	return b.String()
}

func codeList(l []string) string {
	if len(l) == 0 {
		return "–"
	}
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = "`" + s + "`"
	}
	return strings.Join(out, ", ")
}

const (
	beginMark = "<!-- pkggraph:begin (generated by go run ./internal/tools/pkggraph; do not edit) -->"
	endMark   = "<!-- pkggraph:end -->"
)

// Splice replaces the text between the markers of page with body.
func Splice(page, body string) (string, error) {
	i := strings.Index(page, beginMark)
	j := strings.Index(page, endMark)
	if i < 0 || j < i {
		return "", fmt.Errorf("the page has no %q ... %q section", beginMark, endMark)
	}
	return page[:i+len(beginMark)] + "\n" + body + page[j:], nil
}

// Generate returns page with its pkggraph section rewritten from g, and
// the drawing's SVG text. It writes nothing: run writes both, the test
// compares them with the files.
func Generate(g *Graph, page, docPath, svgPath string) (doc, svg string, err error) {
	img := filepath.ToSlash(strings.TrimPrefix(svgPath, filepath.Dir(docPath)+"/"))
	body := fmt.Sprintf("![the module's packages, each above what it imports](%s)\n\n%s", img, g.Table())
	doc, err = Splice(page, body)
	if err != nil {
		return "", "", err
	}
	return doc, g.SVG(), nil
}

func run(docPath, svgPath string) error {
	g, err := Load()
	if err != nil {
		return err
	}
	page, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	doc, svg, err := Generate(g, string(page), docPath, svgPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
		return err
	}
	png := strings.TrimSuffix(svgPath, ".svg") + ".png"
	if _, err := exec.LookPath("rsvg-convert"); err == nil {
		if out, err := exec.Command("rsvg-convert", "-o", png, svgPath).CombinedOutput(); err != nil {
			return fmt.Errorf("rsvg-convert: %v: %s", err, out)
		}
	}
	return nil
}

// SVG draws the layered graph (Sugiyama style): rows by layer, an edge
// that spans rows runs through a dummy point in each row between, and a
// few barycentre sweeps order every row so that edges cross less and run
// between boxes rather than through them.
func (g *Graph) SVG() string {
	const (
		charW, boxH, padX  = 7.4, 26.0, 12.0
		rowGap, colGap, mg = 64.0, 20.0, 20.0
		dummyW             = 14.0
	)
	layer := g.Layers()
	top := 0
	for _, l := range layer {
		top = max(top, l)
	}
	row := func(p string) int { return top - layer[p] }
	rows := make([][]string, top+1)
	for _, p := range g.Pkgs {
		rows[row(p)] = append(rows[row(p)], p)
	}
	// Chains: every reduced edge as the list of nodes it passes through
	// (its two packages and a dummy per row between them).
	red := g.Reduced()
	isDummy := map[string]bool{}
	down := map[string][]string{}
	up := map[string][]string{}
	var chains [][]string
	for _, p := range g.Pkgs {
		for _, q := range red[p] {
			chain := []string{p}
			for r := row(p) + 1; r < row(q); r++ {
				d := fmt.Sprintf("·%s>%s@%d", p, q, r)
				isDummy[d] = true
				rows[r] = append(rows[r], d)
				chain = append(chain, d)
			}
			chain = append(chain, q)
			for k := 0; k+1 < len(chain); k++ {
				down[chain[k]] = append(down[chain[k]], chain[k+1])
				up[chain[k+1]] = append(up[chain[k+1]], chain[k])
			}
			chains = append(chains, chain)
		}
	}
	pos := map[string]float64{}
	for _, r := range rows {
		for i, p := range r {
			pos[p] = float64(i)
		}
	}
	for sweep := 0; sweep < 24; sweep++ {
		order := make([]int, len(rows))
		for i := range order {
			order[i] = i
		}
		if sweep%2 == 1 {
			slices.Reverse(order)
		}
		for _, ri := range order {
			bary := map[string]float64{}
			for _, p := range rows[ri] {
				n := up[p]
				if sweep%2 == 1 {
					n = down[p]
				}
				if len(n) == 0 {
					bary[p] = pos[p]
					continue
				}
				sum := 0.0
				for _, q := range n {
					sum += pos[q]
				}
				bary[p] = sum / float64(len(n))
			}
			sort.SliceStable(rows[ri], func(i, j int) bool { return bary[rows[ri][i]] < bary[rows[ri][j]] })
			for i, p := range rows[ri] {
				pos[p] = float64(i)
			}
		}
	}
	type box struct{ x, y, w float64 }
	boxes := map[string]box{}
	wOf := func(p string) float64 {
		if isDummy[p] {
			return dummyW
		}
		return float64(len(p))*charW + 2*padX
	}
	width := 0.0
	for ri, r := range rows {
		x := mg
		for _, p := range r {
			boxes[p] = box{x, mg + float64(ri)*(boxH+rowGap), wOf(p)}
			x += wOf(p) + colGap
		}
		width = max(width, x-colGap+mg)
	}
	for _, r := range rows { // centre each row
		if len(r) == 0 {
			continue
		}
		first, last := boxes[r[0]], boxes[r[len(r)-1]]
		shift := (width-(last.x+last.w-first.x))/2 - first.x
		for _, p := range r {
			b := boxes[p]
			b.x += shift
			boxes[p] = b
		}
	}
	height := mg*2 + float64(len(rows))*boxH + float64(len(rows)-1)*rowGap
	// Ports: a box's edges leave its bottom and enter its top spread out,
	// in the order of the other ends' x.
	port := func(p string, others []string, bottom bool, other string) (float64, float64) {
		b := boxes[p]
		y := b.y
		if bottom {
			y += boxH
		}
		if isDummy[p] {
			return b.x + b.w/2, b.y + boxH/2
		}
		sorted := slices.Clone(others)
		sort.SliceStable(sorted, func(i, j int) bool { return boxes[sorted[i]].x < boxes[sorted[j]].x })
		k := slices.Index(sorted, other)
		return b.x + b.w*float64(k+1)/float64(len(sorted)+1), y
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans Mono, monospace" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", width, height)
	for _, chain := range chains {
		var d strings.Builder
		for k := 0; k+1 < len(chain); k++ {
			x1, y1 := port(chain[k], down[chain[k]], true, chain[k+1])
			x2, y2 := port(chain[k+1], up[chain[k+1]], false, chain[k])
			if k == 0 {
				fmt.Fprintf(&d, "M%.1f,%.1f", x1, y1)
			}
			my := (y1 + y2) / 2
			fmt.Fprintf(&d, " C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, my, x2, my, x2, y2)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#777" stroke-width="1.2" marker-end="url(#a)"/>`+"\n", d.String())
	}
	for _, p := range g.Pkgs {
		bx := boxes[p]
		fill := "#e8f0fe"
		switch {
		case strings.HasPrefix(p, "internal/"):
			fill = "#eeeeee"
		case strings.HasPrefix(p, "cmd/"):
			fill = "#fde8e8"
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="4" fill="%s" stroke="#335"/>`+"\n", bx.x, bx.y, bx.w, boxH, fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", bx.x+bx.w/2, bx.y+boxH/2+4, html.EscapeString(p))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

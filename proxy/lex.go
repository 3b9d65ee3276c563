package proxy

// A tiny, allocation-free SQL lexer: just enough to classify a statement and
// to find the annotations in its comments. It never uses regular expressions
// and never fails: bytes it does not understand become single-byte punctuation
// tokens, and an unterminated string or comment runs to the end of the input
// (and is reported through lexer.unterminated so the classifier can refuse to
// route the statement).

type tokKind uint8

const (
	tokEOF tokKind = iota
	// tokWord is an unquoted identifier or keyword (letters, digits, _ and $).
	tokWord
	// tokString is a quoted string literal ('...' or "...").
	tokString
	// tokIdent is a backquoted identifier.
	tokIdent
	// tokVar is a user variable (@name, @'name', @`name`); text includes '@'.
	tokVar
	// tokSysVar is a system variable (@@name, @@session.name).
	tokSysVar
	// tokAssign is ':='.
	tokAssign
	// tokPunct is any other single byte (text holds it).
	tokPunct
)

type token struct {
	kind tokKind
	// text is the token's bytes in the statement (for strings: including
	// the quotes).
	text string
}

// lexer walks a statement. comments receives every comment's body (without
// the delimiters), including optimizer hints (/*+ ... */) but not executable
// comments (/*! ... */), whose content is lexed as SQL.
type lexer struct {
	s            string
	i            int
	comment      func(body string, block bool) // block: /* */ (hints too), else -- or #
	unterminated bool
	// inExec is true inside an executable comment /*! ... */: its closing
	// "*/" is skipped as whitespace.
	inExec bool
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80
}

// skip passes whitespace and comments.
func (l *lexer) skip() {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == '#':
			l.lineComment(l.i + 1)
		case c == '-' && l.i+1 < len(l.s) && l.s[l.i+1] == '-' && (l.i+2 == len(l.s) || isSpace(l.s[l.i+2])):
			l.lineComment(l.i + 2)
		case c == '*' && l.inExec && l.i+1 < len(l.s) && l.s[l.i+1] == '/':
			l.inExec = false
			l.i += 2
		case c == '/' && l.i+1 < len(l.s) && l.s[l.i+1] == '*':
			if l.i+2 < len(l.s) && l.s[l.i+2] == '!' && !l.inExec {
				// Executable comment: /*!50700 SQL */ or /*! SQL */.
				l.i += 3
				for l.i < len(l.s) && l.s[l.i] >= '0' && l.s[l.i] <= '9' {
					l.i++
				}
				l.inExec = true
				continue
			}
			start := l.i + 2
			end := indexStr(l.s, start, "*/")
			if end < 0 {
				l.unterminated = true
				if l.comment != nil {
					l.comment(l.s[start:], true)
				}
				l.i = len(l.s)
				return
			}
			if l.comment != nil {
				l.comment(l.s[start:end], true)
			}
			l.i = end + 2
		default:
			return
		}
	}
}

func (l *lexer) lineComment(start int) {
	end := start
	for end < len(l.s) && l.s[end] != '\n' {
		end++
	}
	if l.comment != nil {
		l.comment(l.s[start:end], false)
	}
	l.i = end
}

// indexStr is strings.Index from position from, without allocating.
func indexStr(s string, from int, sub string) int {
	for j := from; j+len(sub) <= len(s); j++ {
		if s[j:j+len(sub)] == sub {
			return j
		}
	}
	return -1
}

// quoted returns the end (exclusive) of the quoted run starting at i (s[i]
// is the quote). Backslash escapes apply to ' and " strings; a doubled quote
// is an escaped quote in all three forms.
func (l *lexer) quoted(i int) int {
	q := l.s[i]
	j := i + 1
	for j < len(l.s) {
		c := l.s[j]
		if c == '\\' && q != '`' {
			j += 2
			continue
		}
		if c == q {
			if j+1 < len(l.s) && l.s[j+1] == q {
				j += 2
				continue
			}
			return j + 1
		}
		j++
	}
	l.unterminated = true
	return len(l.s)
}

// next returns the next token.
func (l *lexer) next() token {
	l.skip()
	if l.i >= len(l.s) {
		return token{kind: tokEOF}
	}
	start := l.i
	c := l.s[l.i]
	switch {
	case c == '\'' || c == '"':
		l.i = l.quoted(l.i)
		return token{kind: tokString, text: l.s[start:l.i]}
	case c == '`':
		l.i = l.quoted(l.i)
		return token{kind: tokIdent, text: l.s[start:l.i]}
	case c == '@':
		j := l.i + 1
		kind := tokVar
		if j < len(l.s) && l.s[j] == '@' {
			kind = tokSysVar
			j++
		}
		if j < len(l.s) && (l.s[j] == '\'' || l.s[j] == '"' || l.s[j] == '`') {
			j = l.quoted(j)
		} else {
			for j < len(l.s) && (isWordByte(l.s[j]) || l.s[j] == '.') {
				j++
			}
		}
		l.i = j
		return token{kind: kind, text: l.s[start:j]}
	case c == ':' && l.i+1 < len(l.s) && l.s[l.i+1] == '=':
		l.i += 2
		return token{kind: tokAssign, text: ":="}
	case isWordByte(c):
		j := l.i + 1
		for j < len(l.s) && isWordByte(l.s[j]) {
			j++
		}
		l.i = j
		return token{kind: tokWord, text: l.s[start:j]}
	}
	l.i++
	return token{kind: tokPunct, text: l.s[start:l.i]}
}

// is reports whether t is the keyword kw (kw in upper case), without
// allocating.
func (t token) is(kw string) bool {
	if t.kind != tokWord || len(t.text) != len(kw) {
		return false
	}
	for i := 0; i < len(kw); i++ {
		c := t.text[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

func (t token) punct(c byte) bool { return t.kind == tokPunct && len(t.text) == 1 && t.text[0] == c }

// equalFoldASCII compares a and b ignoring ASCII case (b upper case).
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
}

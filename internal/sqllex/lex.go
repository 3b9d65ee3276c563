// Package sqllex is causallab's one lexer of MySQL statement text: the
// classifier of package proxy reads its tokens, and both the proxy and
// package hashroute read the comments it reports (causal tokens,
// min_gtid, consistent_read_id), so a comment is a comment to every
// reader alike.
//
// It is tiny and allocation-free, never uses regular expressions and never
// fails: bytes it does not understand become single-byte punctuation
// tokens, and an unterminated string, quoted identifier or comment runs to
// the end of the input and sets Lexer.Unterminated. It follows MySQL's own
// lexer where the grammar is subtle:
//
//   - `-- ` starts a comment only when the second dash is followed by
//     whitespace or a control character (or ends the input); `#` starts
//     one anywhere.
//   - `/*+ ... */` is an optimizer hint (reported as a Hint comment);
//     `/*! ... */` and `/*!50700 ... */` are executable comments, whose
//     content is SQL: lexed as tokens, not reported as a comment.
//   - String literals ('...', "...") take backslash escapes and doubled
//     quotes (the default sql_mode); backquoted identifiers take doubled
//     backquotes only.
package sqllex

import "strings"

// Kind is a token's kind.
type Kind uint8

const (
	// EOF: no more tokens.
	EOF Kind = iota
	// Word is an unquoted identifier or keyword (letters, digits, _, $ and
	// bytes >= 0x80).
	Word
	// String is a quoted string literal ('...' or "..."); Text includes
	// the quotes.
	String
	// Ident is a backquoted identifier; Text includes the backquotes.
	Ident
	// Var is a user variable (@name, @'name', @`name`); Text includes '@'.
	Var
	// SysVar is a system variable (@@name, @@session.name).
	SysVar
	// Assign is ':='.
	Assign
	// Punct is any other single byte (Text holds it).
	Punct
)

// Token is one token of a statement.
type Token struct {
	Kind Kind
	// Text is the token's bytes in the statement (aliases it).
	Text string
	// Pos is the offset of Text in the statement.
	Pos int
}

// CommentKind is a comment's kind.
type CommentKind uint8

const (
	// Line is a `-- ` or `#` comment, to the end of the line.
	Line CommentKind = iota
	// Block is a plain `/* ... */` comment.
	Block
	// Hint is an optimizer hint `/*+ ... */`.
	Hint
)

// Comment is one comment of a statement.
type Comment struct {
	Kind CommentKind
	// Body is the text between the delimiters (for a Hint, after the '+';
	// for a Line comment, up to the newline). It aliases the statement.
	Body string
	// Start is the offset of the opening delimiter; BodyStart that of
	// Body.
	Start, BodyStart int
	// Unterminated: a Block or Hint comment that never closes (Body runs
	// to the end of the statement).
	Unterminated bool
}

// Lexer walks one statement. The zero value with S set is ready.
type Lexer struct {
	// S is the statement.
	S string
	// Comment, when set, receives every comment in order as Next and
	// NextComment pass it.
	Comment func(Comment)
	// Unterminated is set when a string literal, quoted identifier or
	// comment (executable comments included) never closes.
	Unterminated bool

	i int
	// last is the comment skipComment passed last.
	last Comment
	// inExec is true inside an executable comment /*! ... */: its closing
	// "*/" is skipped as whitespace.
	inExec bool
}

// Pos is the offset of the next byte the lexer reads.
func (l *Lexer) Pos() int { return l.i }

// IsSpace reports whether c is ASCII whitespace as MySQL's lexer sees it.
func IsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// isDashCommentFollower: MySQL starts a `--` comment only when the second
// dash is followed by whitespace or a control character.
func isDashCommentFollower(c byte) bool { return c <= ' ' || c == 0x7f }

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80
}

// skipComment handles a comment or executable-comment delimiter at l.i, if
// any: it passes (and reports) a comment, leaving it in l.last with ok, or
// enters or leaves an executable comment. handled is false when l.i starts
// neither.
func (l *Lexer) skipComment() (ok, handled bool) {
	s, i := l.S, l.i
	switch ch := s[i]; {
	case ch == '#':
		l.lineComment(i, i+1)
		return true, true
	case ch == '-' && i+1 < len(s) && s[i+1] == '-' && (i+2 == len(s) || isDashCommentFollower(s[i+2])):
		l.lineComment(i, i+2)
		return true, true
	case ch == '*' && l.inExec && i+1 < len(s) && s[i+1] == '/':
		l.inExec = false
		l.i += 2
		return false, true
	case ch == '/' && i+1 < len(s) && s[i+1] == '*':
		if i+2 < len(s) && s[i+2] == '!' && !l.inExec {
			// Executable comment: /*!50700 SQL */ or /*! SQL */.
			j := i + 3
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			l.i, l.inExec = j, true
			if indexFrom(s, j, "*/") < 0 {
				l.Unterminated = true
			}
			return false, true
		}
		c := &l.last
		*c = Comment{Kind: Block, Start: i, BodyStart: i + 2}
		if i+2 < len(s) && s[i+2] == '+' {
			c.Kind, c.BodyStart = Hint, i+3
		}
		end := indexFrom(s, c.BodyStart, "*/")
		if end < 0 {
			c.Body, c.Unterminated = s[c.BodyStart:], true
			l.Unterminated = true
			l.i = len(s)
		} else {
			c.Body = s[c.BodyStart:end]
			l.i = end + 2
		}
		if l.Comment != nil {
			l.Comment(*c)
		}
		return true, true
	}
	return false, false
}

func (l *Lexer) lineComment(start, body int) {
	end := len(l.S)
	if j := strings.IndexByte(l.S[body:], '\n'); j >= 0 {
		end = body + j
	}
	l.last = Comment{Kind: Line, Body: l.S[body:end], Start: start, BodyStart: body}
	l.i = end
	if l.Comment != nil {
		l.Comment(l.last)
	}
}

// indexFrom is strings.Index of sub in s from position from (-1: none).
func indexFrom(s string, from int, sub string) int {
	if from > len(s) {
		return -1
	}
	if j := strings.Index(s[from:], sub); j >= 0 {
		return from + j
	}
	return -1
}

// skip passes whitespace and comments.
func (l *Lexer) skip() {
	for l.i < len(l.S) {
		switch c := l.S[l.i]; {
		case IsSpace(c):
			l.i++
			continue
		case c != '#' && c != '-' && c != '/' && c != '*':
			return // cannot open (or close) a comment
		}
		if _, handled := l.skipComment(); !handled {
			return
		}
	}
}

// quoted returns the end (exclusive) of the quoted run starting at i (S[i]
// is the quote). Backslash escapes apply to ' and " strings; a doubled
// quote is an escaped quote in all three forms.
func (l *Lexer) quoted(i int) int {
	s := l.S
	q := s[i]
	j := i + 1
	for j < len(s) {
		c := s[j]
		if c == '\\' && q != '`' {
			j += 2
			continue
		}
		if c == q {
			if j+1 < len(s) && s[j+1] == q {
				j += 2
				continue
			}
			return j + 1
		}
		j++
	}
	l.Unterminated = true
	return len(s)
}

// Next returns the next token, passing whitespace and comments (reported
// to Comment).
func (l *Lexer) Next() Token {
	l.skip()
	s := l.S
	if l.i >= len(s) {
		return Token{Kind: EOF, Pos: len(s)}
	}
	start := l.i
	c := s[l.i]
	switch {
	case c == '\'' || c == '"':
		l.i = l.quoted(l.i)
		return Token{Kind: String, Text: s[start:l.i], Pos: start}
	case c == '`':
		l.i = l.quoted(l.i)
		return Token{Kind: Ident, Text: s[start:l.i], Pos: start}
	case c == '@':
		j := l.i + 1
		kind := Var
		if j < len(s) && s[j] == '@' {
			kind = SysVar
			j++
		}
		if j < len(s) && (s[j] == '\'' || s[j] == '"' || s[j] == '`') {
			j = l.quoted(j)
		} else {
			for j < len(s) && (isWordByte(s[j]) || s[j] == '.') {
				j++
			}
		}
		l.i = j
		return Token{Kind: kind, Text: s[start:j], Pos: start}
	case c == ':' && l.i+1 < len(s) && s[l.i+1] == '=':
		l.i += 2
		return Token{Kind: Assign, Text: ":=", Pos: start}
	case isWordByte(c):
		j := l.i + 1
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		l.i = j
		return Token{Kind: Word, Text: s[start:j], Pos: start}
	}
	l.i++
	return Token{Kind: Punct, Text: s[start:l.i], Pos: start}
}

// NextComment returns the next comment (also reported to Comment), passing
// the tokens before it without building them: only the bytes that can open
// a string, a quoted identifier or a comment are looked at. ok is false at
// the end of the statement.
func (l *Lexer) NextComment() (c Comment, ok bool) { return l.NextCommentBefore(len(l.S)) }

// NextCommentBefore is NextComment for a comment that starts before limit:
// when none does, ok is false and Pos is at limit or past it (a string or
// comment that starts before limit is passed whole), or at the end.
func (l *Lexer) NextCommentBefore(limit int) (c Comment, ok bool) {
	s := l.S
	limit = min(limit, len(s))
	for l.i < limit {
		i := l.i
		for i < limit && !mayOpen(s[i]) {
			i++
		}
		if l.i = i; i >= limit {
			break
		}
		switch ch := s[i]; ch {
		case '\'', '"', '`':
			l.i = l.quoted(l.i)
			continue
		}
		ok, handled := l.skipComment()
		if ok {
			return l.last, true
		}
		if !handled {
			l.i++
		}
	}
	return Comment{}, false
}

// mayOpen reports whether c can open a string literal, a quoted identifier
// or a comment, or close an executable comment: ' " ` # - / *.
func mayOpen(c byte) bool {
	const mask = 1<<'\'' | 1<<'"' | 1<<'#' | 1<<'-' | 1<<'/' | 1<<'*'
	return c < 64 && (uint64(mask)>>c)&1 != 0 || c == '`'
}

// Is reports whether t is the keyword kw (kw in upper case), without
// allocating.
func (t Token) Is(kw string) bool { return t.Kind == Word && EqualFoldUpper(t.Text, kw) }

// Punct reports whether t is the punctuation byte c.
func (t Token) Punct(c byte) bool { return t.Kind == Punct && len(t.Text) == 1 && t.Text[0] == c }

// EqualFoldUpper compares a and upper ignoring ASCII case (upper must be in
// upper case), without allocating.
func EqualFoldUpper(a, upper string) bool {
	if len(a) != len(upper) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

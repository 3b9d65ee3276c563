package live

import (
	"log/slog"
	"strings"
)

// errAttr logs an error as one line of text. slog's text handler formats
// other values with %+v, and go-mysql's errors (pingcap/errors) print
// their whole stack trace under %+v: that flooded the logs with one stack
// per failed poll or marked-down node. Error() is the message alone.
func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.String("err", "")
	}
	return slog.String("err", oneLine(err.Error()))
}

// oneLine folds line breaks so one event stays one log line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", " | ").Replace(s)), " ")
}

//go:build !linux

package rawnet

import "net"

// Wrap returns c unchanged: raw system calls are used on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

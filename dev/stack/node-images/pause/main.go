// pause holds a pod sandbox's namespaces: it sleeps until SIGINT or SIGTERM.
// The stack builds it locally (no registry): a static binary in an otherwise empty image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// Reap children too: with a shared PID namespace pause is PID 1.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGCHLD)
	<-stop
}

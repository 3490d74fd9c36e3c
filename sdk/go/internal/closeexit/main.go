// Command closeexit is run by TestCloseLetsTheProcessExit: a client of a
// relay with a change listener and a change channel, then (mode "close")
// Close, or (mode "no-close") nothing, and main returns. The process must
// exit on its own: nothing the library started may hold it.
//
//	closeexit RELAY_URL SDK_KEY close|no-close
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: closeexit RELAY_URL SDK_KEY close|no-close")
		os.Exit(2)
	}
	c, err := flagstream.NewClient(flagstream.Options{Endpoints: []string{os.Args[1]}, SDKKey: os.Args[2]})
	if err != nil {
		fmt.Println("NewClient:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		fmt.Println("WaitReady:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if _, err := c.OnChange(func(flagstream.Change) {}); err != nil {
		fmt.Println("OnChange:", err)
		os.Exit(1)
	}
	changes, _ := c.Changes(0) // never read: a send may be blocked at exit
	_ = changes
	if os.Args[3] == "close" {
		if err := c.Close(ctx); err != nil {
			fmt.Println("Close:", err)
			os.Exit(1)
		}
		fmt.Println("closed")
	}
	fmt.Println("returning from main")
}

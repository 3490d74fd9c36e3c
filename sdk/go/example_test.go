package flagstream_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

// A client of a relay: the demo relay of the README's quickstart
// (`cargo run --release -p flagstream-relay -- demo`).
func ExampleNewClient() {
	key, err := os.ReadFile("flagstream-data/demo-sdk-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := flagstream.NewClient(flagstream.Options{
		Endpoints: []string{"http://127.0.0.1:7070"},
		SDKKey:    strings.TrimSpace(string(key)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		fmt.Println(err)
		return
	}
	user, _ := flagstream.NewContext("user-42")
	defer user.Close()
	_ = user.SetString("country", "US")
	_ = user.SetString("plan", "enterprise")
	fmt.Println(c.Bool("new-checkout", user, false), c.String("theme", user, "light"))
}

// Test data: flags served as they are, no relay.
func ExampleNewTestDataClient() {
	c, err := flagstream.NewTestDataClient(`
flags:
  - key: new-checkout
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: pro
        clauses: [{attribute: plan, op: in, values: [pro]}]
        serve: {variation: 0}
    fallthrough: {variation: 1}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(context.Background())
	user, _ := flagstream.NewContext("user-1")
	defer user.Close()
	_ = user.SetString("plan", "pro")
	on, d := c.BoolDetail("new-checkout", user, false)
	fmt.Println(on, d.Reason, d.RuleID)
	fmt.Println(c.Bool("no-such-flag", user, true))
	// Output:
	// true RULE_MATCH pro
	// true
}

// Changes as a channel: each applied revision and the flags it touched.
func ExampleClient_Changes() {
	c, err := flagstream.NewTestDataClient(`flags: []`)
	if err != nil {
		fmt.Println(err)
		return
	}
	changes, stop := c.Changes(16)
	defer stop()
	go func() {
		for ch := range changes {
			if ch.Missed {
				fmt.Println("changes were missed: re-read everything")
				continue
			}
			fmt.Println("revision", ch.Revision, "changed", ch.Flags)
		}
	}()
	_ = c.Close(context.Background()) // closes the channel
}

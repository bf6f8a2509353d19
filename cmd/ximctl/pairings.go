package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"
)

// runPairings lists a bot's pending pairing codes, or approves one (edge-api §4.1).
func runPairings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl pairings", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	bot := fs.String("bot", "", "the bot's id (required)")
	approve := fs.String("approve", "", "a pending code to approve: its person is added to the bot's allow_users")
	setUsage(fs, stderr, "-bot ID [-approve CODE] [flags]",
		"Lists a bot's pending pairing codes (code, person, name, expiry), or approves one: the person's next message opens their conversation.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *bot == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := cf.resolve(); err != nil {
		return err
	}
	base := "http://" + cf.addr + "/v1/bots/" + url.PathEscape(*bot) + "/pairings"
	if *approve != "" {
		if _, err := call(ctx, cf, http.MethodPost, base+"/"+url.PathEscape(*approve), http.StatusNoContent); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "approved %s: the person's next message opens their conversation with %s\n", *approve, *bot)
		return nil
	}
	body, err := call(ctx, cf, http.MethodGet, base, http.StatusOK)
	if err != nil {
		return err
	}
	var list struct {
		Pairings []struct {
			Code        string `json:"code"`
			User        string `json:"user"`
			DisplayName string `json:"display_name"`
			ExpiresAt   int64  `json:"expires_at"`
		} `json:"pairings"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("GET %s: %w", base, err)
	}
	if len(list.Pairings) == 0 {
		fmt.Fprintf(stdout, "no pending pairing codes for %s\n", *bot)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tUSER\tNAME\tEXPIRES")
	for _, p := range list.Pairings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Code, p.User, p.DisplayName, time.UnixMilli(p.ExpiresAt).Format(time.RFC3339))
	}
	return tw.Flush()
}

// call makes one request of the edge's API and returns the body of an answer with status want;
// another answer is an error naming its code and message.
func call(ctx context.Context, cf connFlags, method, u string, want int) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cf.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != want {
		var e struct{ Code, Message string }
		_ = json.Unmarshal(body, &e)
		return nil, fmt.Errorf("%s %s: %d %s: %s", method, u, resp.StatusCode, e.Code, e.Message)
	}
	return body, nil
}

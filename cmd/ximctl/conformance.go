package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/ximd/ximd/internal/conformance"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl conformance", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	listen := fs.String("target-listen", "127.0.0.1:0", "where the webhook target ximctl serves listens (host:port)")
	targetURL := fs.String("target-url", "", "the target's base URL as ximd must call it (default http://<target-listen address>); set it when ximd runs elsewhere")
	wait := fs.Duration("wait", 30*time.Second, "longest wait for anything ximd must do (an ack, a target call, a user message sent again): more than the node's XIM_ACK_TIMEOUT")
	settle := fs.Duration("settle", time.Second, "how long a check watches for something that must not happen")
	only := fs.String("only", "", "run only the checks whose id matches this regular expression")
	asJSON := fs.Bool("json", false, `print {"checks":[{"id","rule","status","detail"}]} on stdout instead of the table`)
	list := fs.Bool("list", false, "list the checks (id, rule, what each proves) and exit")
	setUsage(fs, stderr, "[flags]", "Plays xAgent and a webhook target against a running ximd, through the edge API only, and checks the IM v2 profile's\nrules (its section 11 checklist and every rule observable from outside) on scratch channels it deletes at the end.\nExit status 0 only when no check failed.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *list {
		w := newTableWriter(stdout)
		for _, c := range conformance.Checks() {
			w.row(c.ID, c.Rule, "", c.Detail)
		}
		return nil
	}
	cfg := conformance.Config{TargetListen: *listen, TargetURL: *targetURL, Wait: *wait, Settle: *settle}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		cfg.Only = re
	}
	if err := cf.resolve(); err != nil {
		return err
	}
	cfg.HTTPAddr, cfg.Token = cf.addr, cf.token
	f, ok := stderr.(*os.File)
	tty := ok && term.IsTerminal(int(f.Fd()))
	table := newTableWriter(stdout)
	if tty {
		cfg.Starting = func(i, n int, id string) { fmt.Fprintf(stderr, "\r\033[K[%d/%d] %s ...", i+1, n, id) }
	}
	if !*asJSON {
		table.row("ID", "RULE", "STATUS", "DETAIL")
		cfg.Finished = func(r conformance.Result) {
			if tty {
				fmt.Fprint(stderr, "\r\033[K")
			}
			table.row(r.ID, r.Rule, string(r.Status), r.Detail)
		}
	}
	start := time.Now()
	rep, err := conformance.Run(ctx, cfg)
	if tty {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted; its scratch channels were deleted")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "\n%d checks: %d pass, %d fail, %d skip in %s\n", len(rep.Checks), rep.Count(conformance.Pass),
			rep.Count(conformance.Fail), rep.Count(conformance.Skip), time.Since(start).Round(100*time.Millisecond))
	}
	if n := rep.Count(conformance.Fail); n > 0 {
		return fmt.Errorf("%d of %d checks failed", n, len(rep.Checks))
	}
	return nil
}

// tableWriter writes rows of four columns within 100 columns: id, rule and status padded, the
// detail wrapped at word boundaries onto indented lines.
type tableWriter struct{ w io.Writer }

const (
	idWidth     = 24
	ruleWidth   = 10
	statusWidth = 6
	tableWidth  = 100
)

func newTableWriter(w io.Writer) *tableWriter { return &tableWriter{w: w} }

func (t *tableWriter) row(id, rule, status, detail string) {
	lead := fmt.Sprintf("%-*s %-*s %-*s ", idWidth, id, ruleWidth, rule, statusWidth, status)
	indent := strings.Repeat(" ", len(lead))
	for i, line := range wrap(detail, tableWidth-len(lead)) {
		if i == 0 {
			fmt.Fprintln(t.w, strings.TrimRight(lead+line, " "))
		} else {
			fmt.Fprintln(t.w, indent+line)
		}
	}
}

// wrap splits s into lines of at most width bytes at spaces (a longer word gets its own line).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return append(lines, line)
}

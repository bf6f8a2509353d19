package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/test/load"
)

// progressView shows how far a bench run is on w (stderr): on a terminal a bar redrawn in place
// (phase, bar, percent, items, elapsed), cleared whenever a result line is written; otherwise
// plain lines, one every interval and one when a phase ends.
type progressView struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu      sync.Mutex
	cur     load.Progress
	started time.Time // of cur.Phase
	drawn   bool      // a bar is on the terminal
}

// Redraw and plain-line intervals.
const (
	barRedraw     = 100 * time.Millisecond
	plainInterval = 2 * time.Second
	barWidth      = 30
)

func newProgressView(w io.Writer) *progressView {
	v := &progressView{w: w, tty: isTerminal(w), interval: plainInterval}
	if v.tty {
		v.interval = barRedraw
	}
	return v
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// update is load.Config.OnProgress.
func (v *progressView) update(p load.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p.Phase != v.cur.Phase {
		v.endPhase()
		v.started = time.Now()
	}
	v.cur = p
}

// endPhase writes the plain line of the phase that ended (nothing on a terminal: its result line
// says it). Called with mu held.
func (v *progressView) endPhase() {
	if v.cur.Phase == "" || v.tty {
		return
	}
	fmt.Fprintf(v.w, "bench: %s done: %d/%d in %s\n", v.cur.Phase, v.cur.Done, v.cur.Total, v.elapsed())
}

// line describes the current phase. Called with mu held.
func (v *progressView) line() string {
	p := v.cur
	pct := 0
	if p.Total > 0 {
		pct = p.Done * 100 / p.Total
	}
	elapsed := v.elapsed()
	if !v.tty {
		return fmt.Sprintf("bench: %s %d%% (%d/%d) %s", p.Phase, pct, p.Done, p.Total, elapsed)
	}
	fill := pct * barWidth / 100
	return fmt.Sprintf("%-20s [%s%s] %3d%% %d/%d %s", p.Phase, strings.Repeat("#", fill), strings.Repeat("-", barWidth-fill), pct, p.Done, p.Total, elapsed)
}

func (v *progressView) elapsed() time.Duration {
	return time.Since(v.started).Round(10 * time.Millisecond)
}

// run draws until ctx ends, then clears the bar or writes the last phase's line.
func (v *progressView) run(ctx context.Context) {
	t := time.NewTicker(v.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			v.mu.Lock()
			v.clear()
			v.endPhase()
			v.cur = load.Progress{}
			v.mu.Unlock()
			return
		case <-t.C:
			v.mu.Lock()
			if v.cur.Phase != "" {
				if v.tty {
					fmt.Fprint(v.w, "\r\033[K"+v.line())
					v.drawn = true
				} else {
					fmt.Fprintln(v.w, v.line())
				}
			}
			v.mu.Unlock()
		}
	}
}

// clear removes the bar from the terminal. Called with mu held.
func (v *progressView) clear() {
	if v.drawn {
		fmt.Fprint(v.w, "\r\033[K")
		v.drawn = false
	}
}

// lines returns a writer to out that clears the bar before each write, so result lines on
// stdout do not land in the middle of the bar when both are the terminal.
func (v *progressView) lines(out io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.clear()
		return out.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

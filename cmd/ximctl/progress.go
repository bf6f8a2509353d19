package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/ximd/ximd/internal/load"
)

// progressView shows how far a bench run is on w (stderr): on a terminal a bar redrawn in place
// (schollz/progressbar: phase, bar, percent, items, elapsed), cleared whenever a result line is
// written; otherwise plain lines, one every interval and one when a phase ends.
type progressView struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu      sync.Mutex
	cur     load.Progress
	started time.Time                // of cur.Phase
	bar     *progressbar.ProgressBar // the current phase's bar (tty)
}

// Redraw and plain-line intervals.
const (
	barRedraw     = 100 * time.Millisecond
	plainInterval = 2 * time.Second
	barWidth      = 30
)

func newProgressView(w io.Writer) *progressView {
	f, ok := w.(*os.File)
	return &progressView{w: w, tty: ok && term.IsTerminal(int(f.Fd())), interval: plainInterval}
}

// update is load.Config.OnProgress.
func (v *progressView) update(p load.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p.Phase != v.cur.Phase {
		v.endPhase()
		v.started = time.Now()
		if v.tty {
			v.bar = progressbar.NewOptions(p.Total, progressbar.OptionSetWriter(v.w), progressbar.OptionSetDescription(fmt.Sprintf("%-20s", p.Phase)),
				progressbar.OptionSetWidth(barWidth), progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true),
				progressbar.OptionSetPredictTime(false), progressbar.OptionThrottle(barRedraw), progressbar.OptionUseANSICodes(true),
				progressbar.OptionSetRenderBlankState(true))
		}
	}
	v.cur = p
	if v.bar != nil {
		_ = v.bar.Set(p.Done)
	}
}

// endPhase clears the bar of the phase that ended, or writes its plain line. Called with mu held.
func (v *progressView) endPhase() {
	if v.cur.Phase == "" {
		return
	}
	if v.tty {
		v.clear()
		v.bar = nil
		return
	}
	fmt.Fprintf(v.w, "bench: %s done: %d/%d in %s\n", v.cur.Phase, v.cur.Done, v.cur.Total, v.elapsed())
}

func (v *progressView) elapsed() time.Duration {
	return time.Since(v.started).Round(10 * time.Millisecond)
}

// run writes a plain line every interval (the bar draws itself) until ctx ends, then clears the
// bar or writes the last phase's line.
func (v *progressView) run(ctx context.Context) {
	t := time.NewTicker(v.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			v.mu.Lock()
			v.endPhase()
			v.cur = load.Progress{}
			v.mu.Unlock()
			return
		case <-t.C:
			v.mu.Lock()
			if p := v.cur; p.Phase != "" && !v.tty {
				fmt.Fprintf(v.w, "bench: %s %d%% (%d/%d) %s\n", p.Phase, p.Done*100/max(p.Total, 1), p.Done, p.Total, v.elapsed())
			}
			v.mu.Unlock()
		}
	}
}

// clear removes the bar from the terminal. Called with mu held.
func (v *progressView) clear() {
	if v.bar != nil {
		_ = v.bar.Clear()
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

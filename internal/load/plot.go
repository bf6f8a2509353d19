package load

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Plot writes an SVG image of a run's sweep: for finals and for deltas, the rate achieved and the
// p99 latency against the rate offered, with the raw JetStream rate and the machine in the title.
func Plot(w io.Writer, rep Report, title string) error {
	if len(rep.Sweep) == 0 {
		return fmt.Errorf("plot: the report has no sweep")
	}
	const width, height = 960, 420
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", width/2, escape(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" text-anchor="middle" fill="#555">raw JetStream async publish in the same run: %.0f msg/s</text>`+"\n", width/2, rep.RawPublishPerSec)
	var finals, deltas panel
	for _, p := range rep.Sweep {
		finals.x = append(finals.x, p.FinalsOffered)
		finals.done = append(finals.done, p.FinalsPerSec)
		finals.p99 = append(finals.p99, ms(p.AckP99))
		deltas.x = append(deltas.x, p.DeltasOffered)
		deltas.done = append(deltas.done, p.DeltasPerSec)
		deltas.p99 = append(deltas.p99, ms(p.DisplayP99))
	}
	finals.title, finals.latency, finals.target = "finals (webhook delivery + ack)", "ack p99", 25
	deltas.title, deltas.latency, deltas.target = "deltas (XIM_EDIT_INTERVAL=0)", "display p99", 10
	finals.draw(&b, 70, 70, 340, 280)
	deltas.draw(&b, 540, 70, 340, 280)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

type panel struct {
	title, latency string
	target         float64 // latency target, ms
	x, done, p99   []float64
}

// draw renders the panel with its plot area at (x0, y0), w × h: achieved rate (left axis, with
// the offered = achieved diagonal) and p99 (right axis, with the target as a dashed line).
func (p panel) draw(b *strings.Builder, x0, y0, w, h float64) {
	xMax := niceCeil(slicesMax(p.x))
	rMax := niceCeil(max(slicesMax(p.done), xMax))
	lMax := niceCeil(max(slicesMax(p.p99), p.target*1.2))
	px := func(v float64) float64 { return x0 + w*v/xMax }
	pr := func(v float64) float64 { return y0 + h - h*v/rMax }
	pl := func(v float64) float64 { return y0 + h - h*v/lMax }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" font-size="13">%s</text>`+"\n", x0+w/2, y0-12, escape(p.title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for i := 0; i <= 5; i++ {
		f := float64(i) / 5
		xv, rv, lv := f*xMax, f*rMax, f*lMax
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, pr(rv), x0+w, pr(rv))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(xv), y0+h+16, short(xv))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#1f77b4">%s</text>`+"\n", x0-6, pr(rv)+4, short(rv))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#d62728">%s</text>`+"\n", x0+w+6, pl(lv)+4, short(lv))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">offered per second</text>`+"\n", x0+w/2, y0+h+34)
	fmt.Fprintf(b, `<text transform="translate(%.0f %.0f) rotate(-90)" text-anchor="middle" fill="#1f77b4">achieved per second</text>`+"\n", x0-48, y0+h/2)
	fmt.Fprintf(b, `<text transform="translate(%.0f %.0f) rotate(90)" text-anchor="middle" fill="#d62728">%s, ms</text>`+"\n", x0+w+44, y0+h/2, p.latency)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="3 3"/>`+"\n", px(0), pr(0), px(min(xMax, rMax)), pr(min(xMax, rMax)))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="6 4" opacity="0.5"/>`+"\n", x0, pl(p.target), x0+w, pl(p.target))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#d62728" opacity="0.7">target p99 %.0f ms</text>`+"\n", x0+w-4, pl(p.target)-4, p.target)
	line := func(ys []float64, py func(float64) float64, color string) {
		var pts []string
		for i := range p.x {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.x[i]), py(ys[i])))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		for _, pt := range pts {
			xy := strings.SplitN(pt, ",", 2)
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
	}
	line(p.done, pr, "#1f77b4")
	line(p.p99, pl, "#d62728")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func slicesMax(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// niceCeil rounds v up to a round axis end: 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten
// (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

// short formats an axis value: 1200 as "1.2k".
func short(v float64) string {
	switch {
	case v >= 1000:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v/1000), "0"), ".") + "k"
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v), "0"), ".")
	}
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

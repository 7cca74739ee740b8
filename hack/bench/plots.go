package main

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// figure is one PNG: one or more panels side by side that share their y
// axis range, one line per proxy against the number of services, and one
// legend on the right for all panels.
type figure struct {
	file   string
	title  string
	ylabel string // with its unit
	panels []panel
	// linear draws both axes linear, the y axis from 0: a cost that grows
	// with the number of services shows as a straight line. Otherwise
	// both are logarithmic, for figures that span orders of magnitude.
	linear bool
}

// panel is one plot of a figure.
type panel struct {
	title string // "" for a figure of one panel
	get   func(*ProxyResult) float64
}

// Figure size and resolution: readable on a page at its natural size.
const (
	figWidth  = 8 * vg.Inch
	figHeight = 4.5 * vg.Inch
	figDPI    = 110
)

// point is one measured value of one proxy at one size.
type point struct {
	proxy    int // index in proxyKinds: its colour, marker and dashes
	services int
	value    float64
}

// points returns the positive, finite values of get for every proxy at
// every size (log axes cannot show 0, nor a missing figure).
func points(results []*SizeResult, get func(*ProxyResult) float64) []point {
	var out []point
	for i, k := range proxyKinds {
		for _, r := range results {
			pr := r.proxy(k.Name)
			if pr == nil {
				continue
			}
			if v := get(pr); v > 0 && !math.IsInf(v, 0) {
				out = append(out, point{proxy: i, services: r.Services, value: v})
			}
		}
	}
	return out
}

// save draws f into dir, and reports whether it had anything to draw.
func (f figure) save(dir string, results []*SizeResult) (bool, error) {
	per := make([][]point, len(f.panels))
	var all []point
	for i, pn := range f.panels {
		per[i] = points(results, pn.get)
		all = append(all, per[i]...)
	}
	if len(all) == 0 {
		return false, nil
	}
	var sizes []int
	for _, r := range results {
		sizes = append(sizes, r.Services)
	}
	xticks := sizeTicks(sizes)
	var xscale, yscale plot.Normalizer = plot.LogScale{}, plot.LogScale{}
	var yticks plot.Ticker = labelledLogTicks{}
	ylo, yhi := logRange(all)
	xlo, xhi := float64(slices.Min(sizes))/1.6, float64(slices.Max(sizes))*1.6
	xlabel := "services (x 10 endpoints), log scale"
	ylabel := f.ylabel + ", log scale"
	if f.linear {
		xscale, yscale, yticks = plot.LinearScale{}, plot.LinearScale{}, labelledLinearTicks{}
		ylo, yhi = 0, slices.MaxFunc(all, func(a, b point) int { return cmp.Compare(a.value, b.value) }).value*1.15
		xlo, xhi = 0, float64(slices.Max(sizes))*1.05
		if len(sizes) == 1 { // one point: in the middle, not on the frame
			xlo, xhi = float64(sizes[0])*0.5, float64(sizes[0])*1.5
		}
		xlabel, ylabel = "services (x 10 endpoints)", f.ylabel
	}

	img := vgimg.NewWith(vgimg.UseWH(figWidth, figHeight), vgimg.UseDPI(figDPI))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	// The figure's title on top, the legend on the right, the panels in
	// what is left.
	titleStyle := textStyle(13)
	titleH := titleStyle.Rectangle(f.title).Size().Y
	dc.FillText(titleStyle, vg.Point{X: dc.Center().X, Y: dc.Max.Y - titleH}, f.title)
	legend, legendW := proxyLegend(all)
	body := draw.Crop(dc, 0, -legendW-vg.Points(12), vg.Points(4), -titleH-vg.Points(8))
	legend.Draw(draw.Crop(dc, figWidth-legendW-vg.Points(6), -vg.Points(6), 0, -titleH-vg.Points(30)))

	w := (body.Max.X - body.Min.X) / vg.Length(len(f.panels))
	for i, pn := range f.panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = 11
		p.X.Label.Text = xlabel
		p.X.Scale = xscale
		p.X.Tick.Marker = xticks
		p.X.Min, p.X.Max = xlo, xhi
		if i == 0 {
			p.Y.Label.Text = ylabel
		}
		p.Y.Scale = yscale
		p.Y.Tick.Marker = yticks
		p.Y.Min, p.Y.Max = ylo, yhi
		p.Add(plotter.NewGrid())
		for k := range proxyKinds {
			var xys plotter.XYs
			for _, pt := range per[i] {
				if pt.proxy == k {
					xys = append(xys, plotter.XY{X: float64(pt.services), Y: pt.value})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, marks, err := plotter.NewLinePoints(xys)
			if err != nil {
				return false, fmt.Errorf("%s: %w", f.file, err)
			}
			styleLine(k, line, marks)
			p.Add(line, marks)
		}
		// Add widened the axes to the data: put the common range back.
		p.X.Min, p.X.Max = xlo, xhi
		p.Y.Min, p.Y.Max = ylo, yhi
		p.Draw(draw.Crop(body, w*vg.Length(i), -w*vg.Length(len(f.panels)-1-i), 0, 0))
	}

	out, err := os.Create(filepath.Join(dir, f.file))
	if err != nil {
		return false, err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		out.Close()
		return false, fmt.Errorf("%s: %w", f.file, err)
	}
	return true, out.Close()
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, size), XAlign: draw.XCenter,
		Handler: plot.DefaultTextHandler}
}

// styleLine gives proxy k the same colour, marker and dashes everywhere.
func styleLine(k int, line *plotter.Line, marks *plotter.Scatter) {
	c := plotutil.DarkColors[k%len(plotutil.DarkColors)]
	line.Color = c
	line.Width = vg.Points(1.5)
	line.Dashes = plotutil.Dashes(k)
	marks.Color = c
	marks.Shape = plotutil.Shape(k)
	marks.Radius = vg.Points(3.5)
}

// proxyLegend is the legend of the proxies that have a point, and its
// width.
func proxyLegend(pts []point) (plot.Legend, vg.Length) {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = 11
	l.Padding = vg.Points(4)
	l.ThumbnailWidth = vg.Points(26)
	var w vg.Length
	for k, kind := range proxyKinds {
		if !slices.ContainsFunc(pts, func(p point) bool { return p.proxy == k }) {
			continue
		}
		line, marks, _ := plotter.NewLinePoints(plotter.XYs{{}})
		styleLine(k, line, marks)
		l.Add(kind.Name, line, marks)
		w = max(w, l.ThumbnailWidth+l.TextStyle.Rectangle(" "+kind.Name).Max.X)
	}
	return l, w
}

// logRange is a y range around the points with room above and below,
// wide enough (a factor of 2.25 at least) to hold three labelled ticks or
// more.
func logRange(pts []point) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		lo, hi = math.Min(lo, p.value), math.Max(hi, p.value)
	}
	return lo / 1.5, hi * 1.5
}

// sizeTicks labels the x axis with the sizes run, in thousands ("5k",
// "10k": "5,000" and "10,000" overlap on a log axis).
func sizeTicks(sizes []int) plot.ConstantTicks {
	var ticks plot.ConstantTicks
	for _, n := range sizes {
		label := thousands(n)
		if n >= 1000 && n%1000 == 0 {
			label = fmt.Sprintf("%dk", n/1000)
		}
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: label})
	}
	return ticks
}

// labelledLogTicks marks a log axis with labelled ticks at round values:
// powers of ten when the range spans enough of them, else 1-2-5 steps,
// else finer ones, so that at least four labels show whatever the range;
// unlabelled minor ticks mark the other integers of each decade.
// (plot.LogTicks labels powers of ten only: a range within one decade got
// no label at all.)
type labelledLogTicks struct{}

// mantissas are the labelled steps, coarsest first.
var mantissas = [][]float64{
	{1},
	{1, 2, 5},
	{1, 1.5, 2, 3, 5, 7},
	{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9},
}

// Ticks implements plot.Ticker.
func (labelledLogTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return nil
	}
	var labelled []plot.Tick
	for _, set := range mantissas {
		labelled = decadeTicks(set, min, max, true)
		if len(labelled) >= 4 {
			break
		}
	}
	ticks := labelled
	for _, t := range decadeTicks([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, min, max, false) {
		if !slices.ContainsFunc(labelled, func(l plot.Tick) bool { return sameValue(l.Value, t.Value) }) {
			ticks = append(ticks, t)
		}
	}
	slices.SortFunc(ticks, func(a, b plot.Tick) int { return cmp.Compare(a.Value, b.Value) })
	return ticks
}

// labelledLinearTicks marks a linear axis every 1, 2 or 5 x 10^e, the
// step that gives 4 to 10 labels, written without trailing zeros
// (plot.DefaultTicks labelled a range from 0 to 300 "0.00" and "250.00"
// only).
type labelledLinearTicks struct{}

// Ticks implements plot.Ticker.
func (labelledLinearTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) || math.IsInf(max-min, 0) {
		return nil
	}
	e := int(math.Floor(math.Log10((max - min) / 10)))
	var m float64
	for {
		for _, m = range []float64{1, 2, 5} {
			if (max-min)/(m*math.Pow10(e)) <= 10 {
				goto found
			}
		}
		e++
	}
found:
	step := m * math.Pow10(e)
	var ticks []plot.Tick
	for k := math.Ceil(min/step - 1e-9); k*step <= max*(1+1e-9); k++ {
		ticks = append(ticks, plot.Tick{Value: k * step, Label: tickLabel(k*m, e)})
	}
	return ticks
}

// decadeTicks returns m x 10^e for every m of set within [min, max].
func decadeTicks(set []float64, min, max float64, label bool) []plot.Tick {
	var ticks []plot.Tick
	for e := int(math.Floor(math.Log10(min))); e <= int(math.Ceil(math.Log10(max))); e++ {
		for _, m := range set {
			v := m * math.Pow10(e)
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if label {
				t.Label = tickLabel(m, e)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

func sameValue(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// tickLabel writes m x 10^e in plain decimals ("0.05", "1.5", "2,000"),
// with no floating-point noise; m has at most one decimal.
func tickLabel(m float64, e int) string {
	if m == 0 { // and -0
		return "0"
	}
	decimals := 0
	if m != math.Trunc(m) {
		decimals = 1
	}
	if d := decimals - e; d > 0 {
		return strconv.FormatFloat(m*math.Pow10(e), 'f', d, 64)
	}
	v := int64(math.Round(m * math.Pow10(e)))
	return thousands64(v)
}

func thousands64(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

package scrape

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Get scrapes url.
func Get(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, nil
}

// Value returns the value of the first sample of family name whose labels
// include want, and whether there is one: a gauge's, counter's or untyped
// sample's value, or a histogram's count of observations.
func (f Families) Value(name string, want map[string]string) (float64, bool) {
	return value(f.Samples(name, want))
}

// Exact is Value for the sample whose labels are exactly want.
func (f Families) Exact(name string, want map[string]string) (float64, bool) {
	var exact []*dto.Metric
	for _, m := range f.Samples(name, want) {
		if len(m.GetLabel()) == len(want) {
			exact = append(exact, m)
		}
	}
	return value(exact)
}

func value(ms []*dto.Metric) (float64, bool) {
	for _, m := range ms {
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// Samples returns the samples of family name whose labels include want.
func (f Families) Samples(name string, want map[string]string) []*dto.Metric {
	fam, ok := f[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

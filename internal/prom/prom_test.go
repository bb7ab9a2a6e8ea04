package prom

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteParse(t *testing.T) {
	in := []Family{
		{Name: "a_total", Type: "counter", Help: "A\nhelp.", Samples: []Sample{
			{Labels: []Label{{"x", `q"uo\te`}, {"y", "line\nbreak"}}, Value: 3},
			{Value: 1.5},
		}},
		{Name: "b", Type: "gauge", Samples: []Sample{{Labels: []Label{{"rank", "0"}}, Value: -2}}},
	}
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Get(out, "a_total", Label{"x", `q"uo\te`}, Label{"y", "line\nbreak"}); !ok || v != 3 {
		t.Errorf("a_total{...} = %v %v", v, ok)
	}
	if v, ok := Get(out, "b", Label{"rank", "0"}); !ok || v != -2 || out[1].Type != "gauge" {
		t.Errorf("b = %v %v %+v", v, ok, out[1])
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{
		"x 1\n",                             // no TYPE
		"# TYPE x counter\nx -1\n",          // negative counter
		"# TYPE x counter\nx{a=\"1\" 1\n",   // unterminated labels
		"# TYPE x counter\nx{1a=\"1\"} 1\n", // bad label name
		"# TYPE x counter\nx one\n",         // bad value
		"# TYPE x counter\nx 1\nx 2\n",      // repeated series
		"# TYPE 9x counter\n",               // bad name
		"# TYPE x countr\n",                 // bad type
	} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestAddLabelMerge(t *testing.T) {
	f := []Family{{Name: "c_total", Type: "counter", Samples: []Sample{{Value: 1}}}}
	m := Merge(AddLabel(f, Label{"rank", "0"}), AddLabel(f, Label{"rank", "1"}))
	if len(m) != 1 || len(m[0].Samples) != 2 {
		t.Fatalf("%+v", m)
	}
	if v, ok := Get(m, "c_total", Label{"rank", "1"}); !ok || v != 1 {
		t.Errorf("rank 1: %v %v", v, ok)
	}
	var buf bytes.Buffer
	Write(&buf, m)
	if _, err := Parse(&buf); err != nil {
		t.Errorf("merged output does not parse: %v", err)
	}
}

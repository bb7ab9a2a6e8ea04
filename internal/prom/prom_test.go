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
		// Before, these were accepted too:
		"# TYPE x counter\nx{a=\"1\",b=\"2\"} 1\nx{b=\"2\",a=\"1\"} 2\n",      // a series repeated, labels reordered
		"# TYPE x counter\nx{a=\"1\",a=\"2\"} 1\n",                            // a label twice
		"# TYPE x counter\nx{a:b=\"1\"} 1\n",                                  // a colon in a label name
		"# TYPE x counter\nx{a=\"\\t\"} 1\n",                                  // an escape the format lacks
		"# TYPE x counter\nx{a=\"1\"b=\"2\"} 1\n",                             // no comma between labels
		"# TYPE x counter\nx{a=\"1\"} 1\n# TYPE y gauge\ny 1\nx{a=\"2\"} 1\n", // x in two groups
		"# TYPE x counter\nx 1\n# TYPE x gauge\n",                             // TYPE after the samples
		"# TYPE x counter\n# TYPE x gauge\n",                                  // two TYPEs
		"# HELP x a\n# HELP x b\n# TYPE x counter\n",                          // two HELPs
		"# TYPE x counter\nx 1 soon\n",                                        // a timestamp that is not one
	} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

// What the format allows parses: a trailing comma in the labels, no
// space after them, a timestamp, escaped quotes and backslashes.
func TestParseAccepts(t *testing.T) {
	text := "# HELP x Some help.\n# TYPE x counter\nx{a=\"q\\\"\\\\\",} 1 1700000000000\nx{a=\"2\"}2\n# TYPE y gauge\ny -Inf\n"
	fams, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Get(fams, "x", Label{"a", `q"\`}); !ok || v != 1 {
		t.Errorf("x{a=q\"\\} = %v %v", v, ok)
	}
	if v, ok := Get(fams, "x", Label{"a", "2"}); !ok || v != 2 {
		t.Errorf("x{a=2} = %v %v", v, ok)
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

// Parse never panics, and what it accepts writes back as text it accepts
// again. (Before, a sample without a space, x{a="1"}2, panicked.)
func FuzzParse(f *testing.F) {
	f.Add("# TYPE x counter\nx{a=\"1\"}2\n")
	f.Add("# HELP x h\n# TYPE x gauge\nx{a=\"q\\\"\",b=\"\\n\"} -1 17\n")
	f.Fuzz(func(t *testing.T, text string) {
		fams, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Write(&buf, fams); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(&buf); err != nil {
			t.Fatalf("%q parsed, but not as written back (%q): %v", text, buf.String(), err)
		}
	})
}

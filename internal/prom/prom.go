// Package prom writes and reads the Prometheus text exposition format
// (version 0.0.4), by hand: gorun's metrics are a few counter families,
// and the official client (github.com/prometheus/client_golang) would add
// a dozen modules (client_model, common, procfs, protobuf, ...) outside
// the project's short list of dependencies, plus a registry and locks on
// the path that counts, for what is forty lines here.
package prom

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ContentType is the exposition format's HTTP content type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Label is one name="value" pair.
type Label struct{ Name, Value string }

// Sample is one line of a family.
type Sample struct {
	Labels []Label
	Value  float64
}

// Family is one metric: its samples share name, help and type.
type Family struct {
	Name, Help, Type string // Type: counter, gauge, untyped
	Samples          []Sample
}

// Write writes families in the text format.
func Write(w io.Writer, families []Family) error {
	bw := bufio.NewWriter(w)
	for _, f := range families {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range f.Samples {
			bw.WriteString(f.Name)
			if len(s.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(l.Name + `="` + escapeValue(l.Value) + `"`)
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(formatValue(s.Value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func escapeValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

// Parse reads the text format strictly: a family's lines form one group
// (at most one HELP and one TYPE, before its samples), every sample
// belongs to a family declared by a TYPE line before it, metric and label
// names are valid, a sample names each label once, label values use only
// the escapes \\, \" and \n, values are numbers, timestamps integers,
// and no series repeats (whatever the order of its labels). It is what
// the tests and the launcher's aggregation read.
func Parse(r io.Reader) ([]Family, error) {
	var fams []Family
	idx := map[string]int{}
	seen := map[string]bool{}
	ended := map[string]bool{} // families whose group another family's line closed
	typed := map[string]bool{}
	helped := map[string]bool{}
	cur := "" // the family of the last line
	enter := func(name string) error {
		if name == cur {
			return nil
		}
		if ended[name] {
			return fmt.Errorf("lines of %s are not in one group", name)
		}
		if cur != "" {
			ended[cur] = true
		}
		cur = name
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			kw, rest, _ := strings.Cut(rest, " ")
			name, text, _ := strings.Cut(rest, " ")
			if kw != "HELP" && kw != "TYPE" {
				continue // a comment
			}
			if !validName(name) {
				return nil, fmt.Errorf("line %d: bad metric name %q", n, name)
			}
			if err := enter(name); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			i, ok := idx[name]
			if !ok {
				i = len(fams)
				idx[name] = i
				fams = append(fams, Family{Name: name, Type: "untyped"})
			}
			if kw == "HELP" {
				if helped[name] {
					return nil, fmt.Errorf("line %d: second HELP for %s", n, name)
				}
				helped[name] = true
				fams[i].Help = text
			} else {
				if typed[name] || len(fams[i].Samples) > 0 {
					return nil, fmt.Errorf("line %d: TYPE for %s after its samples or another TYPE", n, name)
				}
				typed[name] = true
				switch text {
				case "counter", "gauge", "untyped", "summary", "histogram":
					fams[i].Type = text
				default:
					return nil, fmt.Errorf("line %d: bad type %q", n, text)
				}
			}
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		i, ok := idx[name]
		if !ok || !typed[name] {
			return nil, fmt.Errorf("line %d: sample of %s before its TYPE", n, name)
		}
		if err := enter(name); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		key := seriesKey(name, labels)
		if seen[key] {
			return nil, fmt.Errorf("line %d: series %s repeated", n, key)
		}
		seen[key] = true
		if fams[i].Type == "counter" && (value < 0 || math.IsNaN(value)) {
			return nil, fmt.Errorf("line %d: counter %s = %v", n, name, value)
		}
		fams[i].Samples = append(fams[i].Samples, Sample{Labels: labels, Value: value})
	}
	return fams, sc.Err()
}

// seriesKey names a series whatever the order of its labels.
func seriesKey(name string, labels []Label) string {
	ls := make([]string, len(labels))
	for i, l := range labels {
		ls[i] = l.Name + "=" + strconv.Quote(l.Value)
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

func parseSample(line string) (string, []Label, float64, error) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, 0, fmt.Errorf("no value in %q", line)
	}
	name := line[:i]
	if !validName(name) {
		return "", nil, 0, fmt.Errorf("bad metric name %q", name)
	}
	rest := line[i:]
	var labels []Label
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || !validLabelName(rest[:eq]) || len(rest) < eq+2 || rest[eq+1] != '"' {
				return "", nil, 0, fmt.Errorf("bad label in %q", line)
			}
			lname := rest[:eq]
			for _, l := range labels {
				if l.Name == lname {
					return "", nil, 0, fmt.Errorf("label %s twice in %q", lname, line)
				}
			}
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					case '\\', '"':
						v.WriteByte(rest[j])
					default:
						return "", nil, 0, fmt.Errorf("bad escape \\%c in %q", rest[j], line)
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, fmt.Errorf("unterminated label value in %q", line)
			}
			labels = append(labels, Label{lname, v.String()})
			if r, ok := strings.CutPrefix(rest, ","); ok {
				rest = r
			} else if !strings.HasPrefix(rest, "}") {
				return "", nil, 0, fmt.Errorf("want , or } after a label in %q", line)
			}
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return "", nil, 0, fmt.Errorf("want a value (and a timestamp) in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("bad value in %q", line)
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return "", nil, 0, fmt.Errorf("bad timestamp in %q", line)
		}
	}
	return name, labels, v, nil
}

// validLabelName: a metric name without colons.
func validLabelName(s string) bool { return validName(s) && !strings.Contains(s, ":") }

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		ok := r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// Get returns the value of the sample of fams named name whose labels
// include want, and whether there is one.
func Get(fams []Family, name string, want ...Label) (float64, bool) {
	for _, f := range fams {
		if f.Name != name {
			continue
		}
	next:
		for _, s := range f.Samples {
			for _, w := range want {
				found := false
				for _, l := range s.Labels {
					found = found || l == w
				}
				if !found {
					continue next
				}
			}
			return s.Value, true
		}
	}
	return 0, false
}

// AddLabel returns fams with l added to every sample (the launcher adds
// rank="R"), and Merge concatenates families of the same name.
func AddLabel(fams []Family, l Label) []Family {
	out := make([]Family, len(fams))
	for i, f := range fams {
		out[i] = f
		out[i].Samples = make([]Sample, len(f.Samples))
		for j, s := range f.Samples {
			out[i].Samples[j] = Sample{Labels: append([]Label{l}, s.Labels...), Value: s.Value}
		}
	}
	return out
}

// Merge joins families by name, keeping the first help and type, in name order.
func Merge(sets ...[]Family) []Family {
	idx := map[string]int{}
	var out []Family
	for _, fams := range sets {
		for _, f := range fams {
			i, ok := idx[f.Name]
			if !ok {
				idx[f.Name] = len(out)
				out = append(out, Family{Name: f.Name, Help: f.Help, Type: f.Type})
				i = len(out) - 1
			}
			out[i].Samples = append(out[i].Samples, f.Samples...)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

package main

import (
	"math"
	"math/rand"

	"github.com/gorun-hpc/gorun/ddp"
)

// mlp is a multilayer perceptron: Linear → ReLU → … → Linear → softmax
// cross-entropy. Layer l's weights are params[2l] (out×in, row-major) and its
// bias params[2l+1].
type mlp struct {
	dims   []int // input, hidden…, classes
	params []*ddp.Param[float32]
	acts   [][]float32 // per layer input activations for the current batch
	pre    [][]float32 // pre-activations
}

func newMLP(dims []int, seed int64) *mlp {
	rng := rand.New(rand.NewSource(seed))
	m := &mlp{dims: dims}
	for l := 0; l+1 < len(dims); l++ {
		in, out := dims[l], dims[l+1]
		w := &ddp.Param[float32]{Name: "fc" + itoa(l) + ".weight", Shape: []int{out, in}, Value: make([]float32, out*in), Grad: make([]float32, out*in)}
		b := &ddp.Param[float32]{Name: "fc" + itoa(l) + ".bias", Shape: []int{out}, Value: make([]float32, out), Grad: make([]float32, out)}
		scale := float32(math.Sqrt(2 / float64(in))) // He initialisation
		for i := range w.Value {
			w.Value[i] = float32(rng.NormFloat64()) * scale
		}
		m.params = append(m.params, w, b)
	}
	return m
}

func itoa(i int) string { return string(rune('0'+i/10%10)) + string(rune('0'+i%10)) }

func (m *mlp) layers() int { return len(m.dims) - 1 }

// forward computes the logits of a batch (rows of x) and keeps what
// backward needs.
func (m *mlp) forward(x []float32, batch int) []float32 {
	m.acts = m.acts[:0]
	m.pre = m.pre[:0]
	h := x
	for l := 0; l < m.layers(); l++ {
		in, out := m.dims[l], m.dims[l+1]
		w, b := m.params[2*l].Value, m.params[2*l+1].Value
		z := make([]float32, batch*out)
		for s := 0; s < batch; s++ {
			hs := h[s*in : (s+1)*in]
			for o := 0; o < out; o++ {
				acc := b[o]
				wr := w[o*in : (o+1)*in]
				for i, v := range hs {
					acc += wr[i] * v
				}
				z[s*out+o] = acc
			}
		}
		m.acts = append(m.acts, h)
		m.pre = append(m.pre, z)
		if l+1 < m.layers() {
			a := make([]float32, len(z))
			for i, v := range z {
				if v > 0 {
					a[i] = v
				}
			}
			h = a
		} else {
			h = z
		}
	}
	return h
}

// lossAndGrad returns the mean cross-entropy of logits against labels and
// its gradient with respect to the logits.
func lossAndGrad(logits []float32, labels []int, classes int) (float64, []float32) {
	batch := len(labels)
	grad := make([]float32, len(logits))
	loss := 0.0
	for s := 0; s < batch; s++ {
		row := logits[s*classes : (s+1)*classes]
		mx := row[0]
		for _, v := range row {
			if v > mx {
				mx = v
			}
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v - mx))
		}
		for c, v := range row {
			p := math.Exp(float64(v-mx)) / sum
			t := 0.0
			if c == labels[s] {
				t = 1
				loss -= math.Log(p)
			}
			grad[s*classes+c] = float32((p - t) / float64(batch))
		}
	}
	return loss / float64(batch), grad
}

// backward accumulates parameter gradients from dlogits, last layer first,
// calling ready(i) as soon as parameter i's gradient is final, so that its
// bucket's allreduce can start while earlier layers are still computed.
func (m *mlp) backward(dz []float32, batch int, ready func(i int) error) error {
	for l := m.layers() - 1; l >= 0; l-- {
		in, out := m.dims[l], m.dims[l+1]
		wp, bp := m.params[2*l], m.params[2*l+1]
		h := m.acts[l]
		for s := 0; s < batch; s++ {
			hs := h[s*in : (s+1)*in]
			for o := 0; o < out; o++ {
				g := dz[s*out+o]
				if g == 0 {
					continue
				}
				bp.Grad[o] += g
				gr := wp.Grad[o*in : (o+1)*in]
				for i, v := range hs {
					gr[i] += g * v
				}
			}
		}
		if err := ready(2*l + 1); err != nil {
			return err
		}
		if err := ready(2 * l); err != nil {
			return err
		}
		if l == 0 {
			break
		}
		// Gradient with respect to the layer's input, through the ReLU.
		w := wp.Value
		dh := make([]float32, batch*in)
		prev := m.pre[l-1]
		for s := 0; s < batch; s++ {
			for o := 0; o < out; o++ {
				g := dz[s*out+o]
				if g == 0 {
					continue
				}
				wr := w[o*in : (o+1)*in]
				row := dh[s*in : (s+1)*in]
				for i := range row {
					row[i] += g * wr[i]
				}
			}
			for i := 0; i < in; i++ {
				if prev[s*in+i] <= 0 {
					dh[s*in+i] = 0
				}
			}
		}
		dz = dh
	}
	return nil
}

// sgd applies one plain gradient-descent step.
func (m *mlp) sgd(lr float32) {
	for _, p := range m.params {
		for i, g := range p.Grad {
			p.Value[i] -= lr * g
		}
	}
}

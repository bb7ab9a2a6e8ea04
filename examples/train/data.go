package main

import "math/rand"

// dataset is a synthetic classification set: Gaussian blobs around random
// class centres, generated from a fixed seed so every rank builds the same
// set and shards it.
type dataset struct {
	x       []float32
	y       []int
	dim     int
	classes int
}

func newDataset(n, dim, classes int, seed int64) *dataset {
	rng := rand.New(rand.NewSource(seed))
	centres := make([]float32, classes*dim)
	for i := range centres {
		centres[i] = float32(rng.NormFloat64() * 2)
	}
	d := &dataset{x: make([]float32, n*dim), y: make([]int, n), dim: dim, classes: classes}
	for s := 0; s < n; s++ {
		c := rng.Intn(classes)
		d.y[s] = c
		for j := 0; j < dim; j++ {
			d.x[s*dim+j] = centres[c*dim+j] + float32(rng.NormFloat64())
		}
	}
	return d
}

// batch returns the samples that rank `rank` of `size` trains on at step
// `step` with per-rank batch size b: rank r's shard is every size-th block,
// so the union over ranks of step s's batches is the block of size*b
// samples starting at s*size*b — exactly what one rank with batch size*b
// sees at step s.
func (d *dataset) batch(step, rank, size, b int) ([]float32, []int) {
	n := len(d.y)
	start := ((step*size + rank) * b) % (n - n%(size*b))
	return d.x[start*d.dim : (start+b)*d.dim], d.y[start : start+b]
}

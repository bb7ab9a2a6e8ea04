package comm

import (
	"context"
	"testing"
	"time"
)

func TestSmokeAllReduce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 4)
	for _, c := range cs {
		go func() {
			buf := []float32{float32(c.Rank()), 1, 2}
			err := AllReduce(ctx, c, buf, buf, Sum)
			t.Log(c.Rank(), buf)
			done <- err
		}()
	}
	for range cs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		c.Close()
	}
}
